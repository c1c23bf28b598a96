//! The hub as an A2A server (docs/a2a.md), driven by the official A2A JavaScript SDK
//! (`@a2a-js/sdk`, tests/peers/a2a-client.mjs) against `deepcli up` with the ACP SDK echo agent
//! behind it: card discovery, send, stream, get, list, cancel, input-required, the door
//! (token, allowAgents, rate), and bad input over raw HTTP.

use std::process::Command;

use serde_json::{Value, json};

use crate::common::{self, Up, http, npm_peer, transcript};

const TOKEN: &str = "partner-token-0123456789";
const OTHER_TOKEN: &str = "other-peer-token-9876543210";

fn agents() -> String {
    format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      identity: {{name: Echo, description: Echoes what it is told., whenToUse: When you need an echo.}}\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n    - id: other\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        common::sdk_echo_agent().display(),
        common::sdk_echo_agent().display()
    )
}

const CHANNELS: &str = "a2a:\n  expose: [sdk, other]\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n    narrow:\n      token: {source: env, id: NARROW_TOKEN}\n      allowAgents: [other]\n      requestsPerMinute: 5\n";

fn up() -> Up {
    let up = Up::start_config(&agents(), CHANNELS, "bindings: []\n", |c| {
        c.env("PARTNER_TOKEN", TOKEN)
            .env("NARROW_TOKEN", OTHER_TOKEN);
    });
    up.wait_for("the echo agents ready", |doc| {
        ["sdk", "other"]
            .iter()
            .all(|id| Up::runtime(doc, id).is_some_and(|r| r["status"] == "ready"))
    });
    up
}

/// Runs the SDK client over JSON-RPC: (exit success, one JSON document per output line).
fn client(args: &[&str]) -> (bool, Vec<Value>) {
    client_over("jsonrpc", args)
}

/// Runs the SDK client over `transport` (`jsonrpc` or `rest`, the HTTP+JSON binding).
pub(crate) fn client_over(transport: &str, args: &[&str]) -> (bool, Vec<Value>) {
    npm_peer("@a2a-js/sdk");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a-client.mjs");
    let out = Command::new("node")
        .arg(script)
        .args(args)
        .env("A2A_TRANSPORT", transport)
        .output()
        .unwrap();
    let docs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (out.status.success(), docs)
}

fn one(args: &[&str]) -> Value {
    let (ok, docs) = client(args);
    assert!(ok, "{args:?}: {docs:#?}");
    docs.into_iter().next().unwrap()
}

/// A client call the hub refuses: the SDK's error (message and error class).
fn fails(args: &[&str]) -> Value {
    let (ok, docs) = client(args);
    assert!(!ok, "{args:?} should fail: {docs:#?}");
    docs.into_iter().next().unwrap()
}

fn base(up: &Up, agent: &str) -> String {
    format!("http://{}/a2a/{agent}/", up.addr)
}

fn text_of(doc: &Value) -> String {
    doc["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_sdk_discovers_the_card_and_sends_streams_gets_and_lists_tasks() {
    sdk_round_trip("jsonrpc");
}

/// The same, over the HTTP+JSON binding the card declares beside JSON-RPC.
#[test]
fn over_http_json_the_sdk_sends_streams_gets_and_lists_tasks_the_same() {
    sdk_round_trip("rest");
}

/// Runs the Python SDK's client (tests/peers/a2a_client.py) with `args` (the binding first):
/// the JSON documents it printed, one a line; it must succeed.
pub(crate) fn python_client(args: &[&str]) -> Vec<Value> {
    python_peer("a2a_client.py", args)
}

/// Runs the Python SDK script `tests/peers/<script>` with `args`: the JSON documents it
/// printed, one a line; it must succeed.
pub(crate) fn python_peer(script: &str, args: &[&str]) -> Vec<Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(script);
    let out = Command::new("python3")
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    let docs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        out.status.success(),
        "{} {}: {docs:#?} {}",
        script.display(),
        args.first().unwrap_or(&""),
        String::from_utf8_lossy(&out.stderr)
    );
    docs
}

/// The Python SDK (`a2a-sdk`, tests/peers/a2a_client.py) as a client over each binding the card
/// declares: it finds the binding's interface on the card, streams a message to the echo agent
/// and gets the task back (issue 38: third-party clients over every binding).
#[test]
fn the_python_sdk_sends_and_gets_over_json_rpc_and_http_json() {
    let up = up();
    for (binding, endpoint) in [
        ("JSONRPC", base(&up, "sdk")),
        (
            "HTTP+JSON",
            format!("http://{}/a2a-rest/agents/sdk", up.addr),
        ),
    ] {
        let docs = python_client(&[binding, &base(&up, "sdk"), TOKEN, "hello from python"]);
        let chosen = &docs[0];
        assert_eq!(
            chosen["url"].as_str().map(|u| u.trim_end_matches('/')),
            Some(endpoint.trim_end_matches('/')),
            "{binding}: {docs:#?}"
        );
        let task = &docs.last().unwrap()["task"];
        assert_eq!(
            task["status"]["state"], "TASK_STATE_COMPLETED",
            "{binding}: {docs:#?}"
        );
        let said = task["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(said.contains("hello from python"), "{binding}: {docs:#?}");
        assert!(
            docs.iter()
                .any(|d| d.get("statusUpdate").is_some() || d.get("artifactUpdate").is_some()),
            "{binding}: streamed: {docs:#?}"
        );
        // The Python peer's task is a deepcli task too (issue 37), submitted with the reply.
        let id = format!("task-{}", task["id"].as_str().unwrap());
        common::wait_until("the Python peer's deepcli task submitted", || {
            task_shown(&up, &id)["state"] == "submitted"
        });
        let shown = task_shown(&up, &id);
        assert_eq!(shown["requester"], "a2a:partner", "{shown:#}");
        assert_eq!(shown["runtimeState"], "TASK_STATE_COMPLETED", "{shown:#}");
    }
}

fn sdk_round_trip(transport: &str) {
    let client = |args: &[&str]| client_over(transport, args);
    let one = |args: &[&str]| {
        let (ok, docs) = client(args);
        assert!(ok, "{args:?}: {docs:#?}");
        docs.into_iter().next().unwrap()
    };
    let fails = |args: &[&str]| {
        let (ok, docs) = client(args);
        assert!(!ok, "{args:?} should fail: {docs:#?}");
        docs.into_iter().next().unwrap()
    };
    let up = up();
    let url = base(&up, "sdk");
    let rest_url = format!("http://{}/a2a-rest/agents/sdk", up.addr);
    let chosen = one(&["transport", &url, TOKEN]);
    match transport {
        "rest" => {
            assert_eq!(chosen["protocol"], "HTTP+JSON", "{chosen}");
            assert_eq!(chosen["endpoint"], rest_url.as_str(), "{chosen}");
        }
        _ => assert_eq!(chosen["protocol"], "JSONRPC", "{chosen}"),
    }
    // Discovery: the root card is the hub's (its skills are the exposed agents); the
    // per-agent card names the JSON-RPC endpoint, streaming and the bearer scheme.
    let card = one(&["card", &format!("http://{}/", up.addr), TOKEN]);
    assert_eq!(card["name"], "deepcli hub", "{card:#}");
    assert_eq!(card["skills"][0]["name"], "Echo", "{card:#}");
    let card = one(&["card", &url, TOKEN]);
    assert_eq!(card["supportedInterfaces"][0]["url"], url.as_str());
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(card["supportedInterfaces"][1]["url"], rest_url.as_str());
    assert_eq!(
        card["supportedInterfaces"][1]["protocolBinding"],
        "HTTP+JSON"
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["skills"][0]["description"], "When you need an echo.");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );

    // Send (blocking): completed, the reply as the artifact, the exchange as history.
    let task = one(&["send", &url, TOKEN, "hello", "ctx-a"]);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    assert_eq!(task["contextId"], "ctx-a");
    let reply = text_of(&task["artifacts"][0]);
    assert!(
        reply.starts_with("echo: [A2A message] from peer `partner`"),
        "{reply}"
    );
    assert!(reply.ends_with("hello (turn 1)"), "{reply}");
    assert_eq!(task["history"].as_array().unwrap().len(), 2);
    assert_eq!(task["history"][1]["role"], "ROLE_AGENT");

    // One session per (peer, contextId): the same context is the same session's next turn.
    let again = one(&["send", &url, TOKEN, "again", "ctx-a"]);
    assert!(
        text_of(&again["artifacts"][0]).ends_with("again (turn 2)"),
        "{again:#}"
    );
    let said: Vec<_> = transcript(&up.state, "agent:sdk:a2a:partner:ctx-a")
        .into_iter()
        .filter(|(p, _)| p != "acp")
        .collect();
    assert_eq!(said.len(), 4, "{said:?}");
    assert!(
        said.iter().all(|(p, _)| p == "a2a" || p == "agent"),
        "{said:?}"
    );
    assert_eq!(said[0], ("a2a".to_string(), "hello".to_string()));

    // Stream: the task, then its artifact, then the final status; nothing after.
    let (ok, events) = client(&["stream", &url, TOKEN, "streamed", "ctx-b"]);
    assert!(ok, "{events:#?}");
    let task_id = events[0]["task"]["id"].as_str().unwrap().to_string();
    let artifact = events
        .iter()
        .find(|e| e.get("artifactUpdate").is_some())
        .expect("an artifact event");
    assert!(text_of(&artifact["artifactUpdate"]["artifact"]).ends_with("streamed (turn 1)"));
    let last = events.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:#?}"
    );
    assert_eq!(last["statusUpdate"]["taskId"], task_id.as_str());

    // Get, with a history length.
    let got = one(&["get", &url, TOKEN, &task_id, "1"]);
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["history"].as_array().unwrap().len(), 1, "{got:#}");
    let got = fails(&["get", &url, TOKEN, "no-such-task"]);
    assert!(
        got["error"]
            .as_str()
            .unwrap()
            .contains("no task `no-such-task`"),
        "{got:#}"
    );

    // List: every task of this peer and agent, newest first, over pages of 2; by context.
    let listed = one(&["list", &url, TOKEN]);
    assert_eq!(listed["pages"], 2, "{listed:#}");
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{listed:#}");
    assert_eq!(ids[0], task_id, "newest first: {listed:#}");
    let listed = one(&["list", &url, TOKEN, "ctx-a"]);
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2, "{listed:#}");
    let listed = one(&["list", &url, TOKEN, "", "TASK_STATE_CANCELED"]);
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 0, "{listed:#}");
    // Another peer sees none of them.
    let theirs = one(&["list", &base(&up, "other"), OTHER_TOKEN]);
    assert_eq!(theirs["tasks"].as_array().unwrap().len(), 0, "{theirs:#}");

    let status = up.status().unwrap();
    assert_eq!(
        status["a2a"]["exposed"],
        json!(["sdk", "other"]),
        "{status:#}"
    );
    assert_eq!(status["a2a"]["tasks"], 3);
}

#[test]
fn an_agent_asking_back_is_input_required_and_the_answer_continues_the_task() {
    let up = up();
    let url = base(&up, "sdk");
    let asked = one(&[
        "send",
        &url,
        TOKEN,
        "reply: Which city?\\nINPUT_REQUIRED",
        "trip",
    ]);
    assert_eq!(
        asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked:#}"
    );
    assert_eq!(text_of(&asked["status"]["message"]), "Which city?");
    assert!(asked.get("artifacts").is_none(), "{asked:#}");
    let id = asked["id"].as_str().unwrap();
    // A subscriber to the task waiting for input stays until it is terminal (issue 38: the
    // stream sent the task and closed), and sees the answer's run finish it.
    let watcher = {
        let (url, id) = (url.clone(), id.to_string());
        std::thread::spawn(move || client(&["subscribe", &url, TOKEN, &id]))
    };
    common::wait_until("the subscription open", || {
        up.status().is_some_and(|s| s["a2a"]["streams"] == 1)
    });
    let done = one(&["send", &url, TOKEN, "Paris", "trip", id]);
    assert_eq!(done["id"], id, "{done:#}");
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done:#}");
    assert!(
        text_of(&done["artifacts"][0]).ends_with("Paris (turn 2)"),
        "{done:#}"
    );
    assert_eq!(done["history"].as_array().unwrap().len(), 4);
    let (ok, events) = watcher.join().unwrap();
    assert!(ok, "{events:#?}");
    assert_eq!(
        events[0]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{events:#?}"
    );
    assert_eq!(
        events.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| text_of(&e["artifactUpdate"]["artifact"]).ends_with("Paris (turn 2)")),
        "{events:#?}"
    );
    // A finished task takes no more messages.
    let refused = fails(&["send", &url, TOKEN, "more", "trip", id]);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("is TASK_STATE_COMPLETED"),
        "{refused:#}"
    );
    // A task waiting for input is canceled here, honestly.
    let asked = one(&["send", &url, TOKEN, "reply: Sure?\\nINPUT_REQUIRED"]);
    let canceled = one(&["cancel", &url, TOKEN, asked["id"].as_str().unwrap()]);
    assert_eq!(
        canceled["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled:#}"
    );
}

#[test]
fn cancel_reaches_the_runtime_and_an_unconfirmed_cancel_is_not_reported_canceled() {
    let up = up();
    let url = base(&up, "sdk");
    // `slow` waits for session/cancel and confirms it.
    let started = one(&["send-nowait", &url, TOKEN, "slow"]);
    let id = started["id"].as_str().unwrap().to_string();
    let watcher = {
        let (url, id) = (url.clone(), id.clone());
        std::thread::spawn(move || client(&["subscribe", &url, TOKEN, &id]))
    };
    common::wait_until("the task working", || {
        one(&["get", &url, TOKEN, &id])["status"]["state"] == "TASK_STATE_WORKING"
    });
    let canceled = one(&["cancel", &url, TOKEN, &id]);
    assert_eq!(
        canceled["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled:#}"
    );
    let (ok, sub) = watcher.join().unwrap();
    assert!(ok, "{sub:#?}");
    assert_eq!(
        sub.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED",
        "{sub:#?}"
    );
    let again = fails(&["cancel", &url, TOKEN, &id]);
    assert!(
        again["error"]
            .as_str()
            .unwrap()
            .contains("cannot be canceled"),
        "{again:#}"
    );
    let runs = http(
        up.addr,
        "GET",
        "/v1/runs",
        &[("authorization", &format!("Bearer {}", token(&up)))],
        b"",
    );
    assert_eq!(runs.body["runs"][0]["sourceTool"], "a2a", "{:#}", runs.body);
    assert_eq!(
        runs.body["runs"][0]["state"], "cancelled",
        "{:#}",
        runs.body
    );

    // `stubborn` ignores session/cancel and answers: the outcome is unknown, not canceled.
    let started = one(&["send-nowait", &url, TOKEN, "stubborn"]);
    let id = started["id"].as_str().unwrap().to_string();
    common::wait_until("the task working", || {
        one(&["get", &url, TOKEN, &id])["status"]["state"] == "TASK_STATE_WORKING"
    });
    let answer = one(&["cancel", &url, TOKEN, &id]);
    assert_eq!(answer["status"]["state"], "TASK_STATE_FAILED", "{answer:#}");
    assert_eq!(
        answer["metadata"]["deepcli"]["runState"], "uncertain",
        "{answer:#}"
    );
    assert!(
        text_of(&answer["status"]["message"]).contains("outcome is unknown"),
        "{answer:#}"
    );
}

fn token(up: &Up) -> String {
    std::fs::read_to_string(up.state.join("operator-token"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn the_door_refuses_a_wrong_token_an_agent_outside_allow_agents_and_a_peer_over_its_rate() {
    let up = up();
    let wrong = fails(&["send", &base(&up, "sdk"), "not-a-peer-token-at-all", "hi"]);
    assert!(
        wrong["error"]
            .as_str()
            .unwrap()
            .contains("no valid peer token"),
        "{wrong:#}"
    );
    // The refusal answers the request's own id, as JSON-RPC asks.
    let raw = crate::common::http(
        up.addr,
        "POST",
        "/a2a/sdk/",
        &[
            ("authorization", "Bearer not-a-peer-token-at-all"),
            ("content-type", "application/json"),
        ],
        br#"{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{}}"#,
    );
    assert_eq!(raw.status, 401, "{:#}", raw.body);
    assert_eq!(raw.body["id"], 7, "{:#}", raw.body);
    let none = fails(&["send", &base(&up, "sdk"), "-", "hi"]);
    assert!(
        none["error"]
            .as_str()
            .unwrap()
            .contains("no valid peer token"),
        "{none:#}"
    );
    // `narrow` may reach `other` only.
    let outside = fails(&["send", &base(&up, "sdk"), OTHER_TOKEN, "hi"]);
    assert!(
        outside["error"]
            .as_str()
            .unwrap()
            .contains("may not reach this agent"),
        "{outside:#}"
    );
    // 5 requests a minute: of 8 in a row, the first 5 pass (the refusal above took none: a
    // request is counted against the rate only once it is admitted).
    let burst = one(&["burst", &base(&up, "other"), OTHER_TOKEN, "8"]);
    assert_eq!(burst["ok"], 5, "{burst:#}");
    assert_eq!(burst["errors"].as_array().unwrap().len(), 3, "{burst:#}");
    assert!(
        burst["errors"][0]
            .as_str()
            .unwrap()
            .contains("requests per minute"),
        "{burst:#}"
    );
    // Nothing reached a runtime.
    let status = up.status().unwrap();
    assert_eq!(status["a2a"]["tasks"], 0, "{status:#}");
    assert_eq!(status["a2a"]["refused"]["unauthenticated"], 3, "{status:#}");
    assert_eq!(status["a2a"]["refused"]["forbidden"], 1, "{status:#}");
    assert_eq!(status["a2a"]["refused"]["rateLimited"], 3, "{status:#}");
    // A card has a validator: asked again with it, it is not sent again.
    for path in [
        "/.well-known/agent-card.json",
        "/a2a/sdk/.well-known/agent-card.json",
    ] {
        let card = http(up.addr, "GET", path, &[], b"");
        assert_eq!(card.status, 200, "{path}");
        let etag = card.etag.unwrap_or_else(|| panic!("{path}: no ETag"));
        let again = http(up.addr, "GET", path, &[("if-none-match", &etag)], b"");
        assert_eq!(
            (again.status, again.etag.as_deref()),
            (304, Some(etag.as_str())),
            "{path}"
        );
        let stale = http(up.addr, "GET", path, &[("if-none-match", "\"0\"")], b"");
        assert_eq!(stale.status, 200, "{path}");
    }
    // A card for an agent that is not exposed does not exist.
    assert_eq!(
        http(
            up.addr,
            "GET",
            "/a2a/main/.well-known/agent-card.json",
            &[],
            b""
        )
        .status,
        404
    );
}

/// The status of a POST of a body over the 1 MiB limit (the hub answers before it has read
/// it all, so the rest may not be written).
fn oversized(up: &Up) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(up.addr).unwrap();
    let size = 2 * 1024 * 1024;
    let head = format!(
        "POST /a2a/sdk/ HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n",
        up.addr
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(&vec![b' '; size]);
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"))
}

fn rpc(up: &Up, body: &[u8], headers: &[(&str, &str)]) -> (u16, Value) {
    let auth = format!("Bearer {TOKEN}");
    let mut all = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    all.extend_from_slice(headers);
    let answer = http(up.addr, "POST", "/a2a/sdk/", &all, body);
    (answer.status, answer.body)
}

#[test]
fn bad_json_rpc_is_answered_with_its_error_and_changes_nothing() {
    let up = up();
    let call = |method: &str, params: Value| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
            .unwrap()
    };
    let msg =
        |parts: Value| json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts}});
    let code = |(_, body): (u16, Value)| body["error"]["code"].as_i64().unwrap_or_default();

    assert_eq!(code(rpc(&up, b"{not json", &[])), -32700);
    assert_eq!(code(rpc(&up, b"[]", &[])), -32600);
    assert_eq!(
        code(rpc(&up, br#"{"jsonrpc":"2.0","method":"GetTask"}"#, &[])),
        -32600
    );
    let (_, unknown) = rpc(&up, &call("tasks/explode", json!({})), &[]);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown:#}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SendMessage"),
        "{unknown:#}"
    );
    assert_eq!(code(rpc(&up, &call("SendMessage", json!({})), &[])), -32602);
    assert_eq!(
        code(rpc(&up, &call("SendMessage", msg(json!([]))), &[])),
        -32602
    );
    let (_, big) = rpc(
        &up,
        &call("SendMessage", msg(json!([{"text": "x".repeat(70_000)}]))),
        &[],
    );
    assert_eq!(big["error"]["code"], -32602, "{big:#}");
    assert!(
        big["error"]["message"]
            .as_str()
            .unwrap()
            .contains("65536 bytes"),
        "{big:#}"
    );
    // (A file part is taken since issue 38's file parts: a2a_files.rs.) An A2A error carries
    // its ErrorInfo (A2A 1.0's MUST).
    let (_, missing) = rpc(&up, &call("GetTask", json!({"id": "no-such-task"})), &[]);
    assert_eq!(missing["error"]["code"], -32001, "{missing:#}");
    let info = &missing["error"]["data"][0];
    assert_eq!(
        (&info["@type"], &info["reason"], &info["domain"]),
        (
            &json!("type.googleapis.com/google.rpc.ErrorInfo"),
            &json!("TASK_NOT_FOUND"),
            &json!("a2a-protocol.org")
        ),
        "{missing:#}"
    );
    assert_eq!(oversized(&up), 413);
    let (_, version) = rpc(
        &up,
        &call("GetTask", json!({"id": "x"})),
        &[("a2a-version", "0.5")],
    );
    assert_eq!(version["error"]["code"], -32009, "{version:#}");
    assert_eq!(
        version["error"]["data"][0]["reason"], "VERSION_NOT_SUPPORTED",
        "{version:#}"
    );
    let (_, ctx) = rpc(
        &up,
        &call(
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "contextId": "a:b", "parts": [{"text": "x"}]}}),
        ),
        &[],
    );
    assert_eq!(ctx["error"]["code"], -32602, "{ctx:#}");
    let (_, push) = rpc(
        &up,
        &call("CreateTaskPushNotificationConfig", json!({})),
        &[],
    );
    // Push configs are served (a2a_push.rs); one without its task is a bad request.
    assert_eq!(push["error"]["code"], -32602, "{push:#}");
    let (_, old_push) = rpc(
        &up,
        &call("tasks/pushNotificationConfig/set", json!({})),
        &[],
    );
    // 0.3's name is served too (a2a_push.rs); without its task it is a bad request as well.
    assert_eq!(old_push["error"]["code"], -32602, "{old_push:#}");
    // Nothing of it became a task.
    assert_eq!(up.status().unwrap()["a2a"]["tasks"], 0);

    // A2A 0.3's method names and shapes are served too.
    let (_, old) = rpc(
        &up,
        &call(
            "message/send",
            json!({"message": {"kind": "message", "messageId": "m2", "role": "user", "parts": [{"kind": "text", "text": "old"}]}}),
        ),
        &[("a2a-version", "0.3")],
    );
    assert_eq!(old["result"]["kind"], "task", "{old:#}");
    assert_eq!(old["result"]["status"]["state"], "completed", "{old:#}");
    assert_eq!(
        old["result"]["artifacts"][0]["parts"][0]["kind"], "text",
        "{old:#}"
    );
    let id = old["result"]["id"].as_str().unwrap();
    let (_, got) = rpc(&up, &call("tasks/get", json!({"id": id})), &[]);
    assert_eq!(got["result"]["status"]["state"], "completed", "{got:#}");
}

/// The scripted remote A2A agent on the SDK's server (tests/peers/a2a-remote.mjs), stopped
/// when dropped; what it prints on stderr (each cancel it got) is in `log`.
struct RemoteAgent {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl RemoteAgent {
    fn start(env: &[(&str, &str)]) -> RemoteAgent {
        npm_peer("express");
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let log = dir.path().join("stderr");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a-remote.mjs");
        let child = Command::new("node")
            .arg(script)
            .arg(&port_file)
            .envs(env.iter().copied())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // Its port whole: the file exists before the write that fills it.
        common::wait_until("the remote A2A agent listening", || {
            std::fs::read_to_string(&port_file).is_ok_and(|p| p.trim().parse::<u16>().is_ok())
        });
        let port = std::fs::read_to_string(&port_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        RemoteAgent {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/a2a", self.port)
    }

    /// The public JWK its card is signed with (started with `A2A_REMOTE_SIGN=1`).
    fn card_key(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("port.jwk")).unwrap()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

fn remote_up(remote: &RemoteAgent) -> Up {
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n# One message, one reply: no reply-back loop (it would speak to the remote too).\nsession: {{maxPingPongTurns: 0}}\n",
        common::sdk_echo_agent().display(),
        remote.url()
    );
    Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", "remote-secret-token")
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    })
}

/// `deepcli sessions <args…> --json` against `up`.
fn sessions(up: &Up, args: &[&str]) -> Value {
    let out = Command::new(common::bin())
        .args(["--state-dir", up.state.to_str().unwrap(), "sessions"])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn runtime_of(up: &Up, id: &str) -> Value {
    Up::runtime(&up.status().unwrap(), id)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_local_agent_sessions_sends_to_a_remote_a2a_agent_which_cancel_reaches_and_whose_fall_fails_runs()
 {
    let mut remote = RemoteAgent::start(&[("A2A_REMOTE_TOKEN", "remote-secret-token")]);
    let up = remote_up(&remote);
    let doc = up.wait_for("the remote ready and the echo agent ready", |doc| {
        ["remote", "sdk"]
            .iter()
            .all(|id| Up::runtime(doc, id).is_some_and(|r| r["status"] == "ready"))
    });
    let status = Up::runtime(&doc, "remote").unwrap();
    assert_eq!(status["kind"], "a2a", "{status:#}");
    assert_eq!(status["info"]["card"]["name"], "Remote", "{status:#}");
    assert_eq!(
        status["info"]["card"]["url"],
        remote.url().as_str(),
        "{status:#}"
    );

    // A scripted local agent calls sessions_send (through the Hub's MCP server) to the remote.
    let send = |text: &str| {
        let said = sessions(
            &up,
            &[
                "send",
                "agent:sdk:main",
                &format!("mcp sessions_send {{\"agentId\":\"remote\",\"message\":\"{text}\"}}"),
            ],
        );
        let reply = said["reply"].as_str().unwrap_or_default().to_string();
        let result: Value =
            serde_json::from_str(reply.strip_prefix("mcp: ").unwrap_or("null")).unwrap_or_default();
        assert!(!result.is_null(), "{said:#}");
        result
    };
    let first = send("hello remote");
    assert_eq!(first["status"], "ok", "{first:#}");
    assert_eq!(
        first["reply"], "remote: hello remote (context turn 1)",
        "{first:#}"
    );
    // The session's messages go in one contextId.
    let second = send("and again");
    assert_eq!(
        second["reply"], "remote: and again (context turn 2)",
        "{second:#}"
    );
    // Data and file parts of the remote's artifact are lines of the reply, never dropped.
    let files = send("files");
    assert_eq!(
        files["reply"],
        format!(
            "files:\n{{\"n\":1}}\n[file from the remote: `r.txt`, text/plain, 5 bytes, sha256 {} — not kept by deepcli]\n[file from the remote: `big.bin`, no media type, at https://files.example/big.bin — not fetched by deepcli]",
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        ),
        "{files:#}"
    );

    // Cancel reaches the remote as CancelTask; it confirms, the run is cancelled.
    let started = sessions(
        &up,
        &["send", "agent:remote:main", "slow", "--timeout", "0"],
    );
    assert!(started["runId"].is_string(), "{started:#}");
    common::wait_until("the remote working on it", || {
        sessions(&up, &["show", "agent:remote:main"])
            .to_string()
            .contains("running")
    });
    let cancelled = sessions(&up, &["cancel", "agent:remote:main"]);
    assert!(
        cancelled.to_string().contains("\"cancelled\""),
        "{cancelled:#}"
    );
    let log = std::fs::read_to_string(&remote.log).unwrap();
    assert!(
        log.contains("cancel "),
        "the remote got no CancelTask: {log}"
    );

    // The remote goes down mid-task: the run's outcome is unknown (never `completed`), the
    // status says the remote is unreachable, and a message then fails at once, cleanly.
    let started = sessions(
        &up,
        &["send", "agent:remote:main", "slow", "--timeout", "0"],
    );
    let run = started["runId"].as_str().unwrap().to_string();
    common::wait_until("the remote working on it", || {
        sessions(&up, &["show", "agent:remote:main"])
            .to_string()
            .contains("running")
    });
    remote.stop();
    let token = token(&up);
    common::wait_until("the run ended", || {
        let doc = http(
            up.addr,
            "GET",
            &format!("/v1/runs/{run}"),
            &[("authorization", &format!("Bearer {token}"))],
            b"",
        )
        .body;
        doc["state"] == "uncertain"
    });
    common::wait_until("the status saying the remote is down", || {
        let r = runtime_of(&up, "remote");
        r["status"] == "failed"
            && r["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("cannot read the agent card"))
    });
    let down = send("anyone?");
    assert_eq!(down["status"], "error", "{down:#}");
    assert!(
        down["error"]
            .as_str()
            .unwrap()
            .contains("cannot take messages now"),
        "{down:#}"
    );
}

#[test]
fn a_remote_whose_card_names_another_url_is_an_error_in_the_status() {
    let remote = RemoteAgent::start(&[("A2A_REMOTE_CARD_URL", "http://elsewhere.example/a2a")]);
    let up = remote_up(&remote);
    let doc = up.wait_for("the remote refused", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "failed")
    });
    let status = Up::runtime(&doc, "remote").unwrap();
    let why = status["lastError"].as_str().unwrap();
    assert!(
        why.contains("`http://elsewhere.example/a2a` (JSONRPC) — not `runtime.url`"),
        "{why}"
    );
    let said = sessions(&up, &["send", "agent:remote:main", "hello"]);
    assert!(
        said.to_string().contains("cannot take messages now"),
        "{said:#}"
    );
}

/// A remote that serves its card only at its origin's well-known place (A2A's for a server of
/// one agent), not under `runtime.url`, is found there and answers.
#[test]
fn a_remote_whose_card_is_at_its_origin_is_found_there() {
    let remote = RemoteAgent::start(&[("A2A_REMOTE_CARD_AT_ROOT", "1")]);
    let up = remote_up(&remote);
    up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let said = sessions(&up, &["send", "agent:remote:main", "hello"]);
    assert_eq!(said["reply"], "remote: hello (context turn 1)", "{said:#}");
}

/// A remote's question (`TASK_STATE_INPUT_REQUIRED`) is answered in its task after the
/// controller restarted: which task waits is kept in the state.
#[test]
fn a_remotes_question_is_answered_in_its_task_after_a_restart() {
    let remote = RemoteAgent::start(&[]);
    let mut up = remote_up(&remote);
    let ready = |up: &Up| {
        up.wait_for("the remote ready", |doc| {
            Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
        });
    };
    ready(&up);
    let asked = sessions(&up, &["send", "agent:remote:main", "ask"]);
    assert_eq!(asked["reply"], "which one?", "{asked:#}");
    assert!(up.terminate().success());
    up.restart(|c| {
        c.env("REMOTE_TOKEN", "remote-secret-token")
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    });
    ready(&up);
    let answered = sessions(&up, &["send", "agent:remote:main", "this one"]);
    assert_eq!(
        answered["reply"], "remote: this one (context turn 2, task continued)",
        "{answered:#}"
    );
}

/// `runtime.cardKey`: a remote whose card (signed by the JS remote itself, RFC 8785 over the
/// card as served) verifies with the key answers; one whose card changed after signing, or
/// that is not signed, is `failed` with the reason and takes no message.
#[test]
fn a_remotes_card_must_verify_with_its_card_key() {
    let signed = RemoteAgent::start(&[("A2A_REMOTE_SIGN", "1")]);
    let tampered = RemoteAgent::start(&[("A2A_REMOTE_SIGN", "1"), ("A2A_REMOTE_SIGN_TAMPER", "1")]);
    let unsigned = RemoteAgent::start(&[]);
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("signed.jwk");
    std::fs::write(&key_file, signed.card_key()).unwrap();
    let agent = |id: &str, remote: &RemoteAgent, key: &str| {
        format!(
            "    - id: {id}\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}, cardKey: {key}}}\n",
            remote.url()
        )
    };
    let inline = |remote: &RemoteAgent| format!("'{}'", remote.card_key());
    let agents = format!(
        "agents:\n  list:\n    - id: main\n{}{}{}",
        agent(
            "signed",
            &signed,
            &format!("{{source: file, path: \"{}\"}}", key_file.display())
        ),
        agent("tampered", &tampered, &inline(&tampered)),
        agent("unsigned", &unsigned, &inline(&signed)),
    );
    let up = Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", "remote-secret-token")
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    });
    let doc = up.wait_for("each remote checked", |doc| {
        Up::runtime(doc, "signed").is_some_and(|r| r["status"] == "ready")
            && ["tampered", "unsigned"]
                .iter()
                .all(|a| Up::runtime(doc, a).is_some_and(|r| r["status"] == "failed"))
    });
    let signed_status = Up::runtime(&doc, "signed").unwrap();
    assert_eq!(
        signed_status["info"]["card"]["signatureVerified"], true,
        "{signed_status:#}"
    );
    let why = |id: &str| Up::runtime(&doc, id).unwrap()["lastError"].to_string();
    assert!(
        why("tampered").contains("the ES256 signature does not verify"),
        "{}",
        why("tampered")
    );
    assert!(
        why("unsigned").contains("not signed"),
        "{}",
        why("unsigned")
    );
    let said = sessions(&up, &["send", "agent:signed:main", "hello"]);
    assert_eq!(said["reply"], "remote: hello (context turn 1)", "{said:#}");
    let refused = sessions(&up, &["send", "agent:tampered:main", "hello"]);
    assert!(
        refused.to_string().contains("cannot take messages now"),
        "{refused:#}"
    );
}

const ROUTED_CHANNELS: &str = "channels:\n  a2a:\n    dmPolicy: allowlist\n    allowFrom: [partner, vendor]\na2a:\n  expose: [research, writer]\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n    vendor:\n      token: {source: env, id: VENDOR_TOKEN}\n    stranger:\n      token: {source: env, id: STRANGER_TOKEN}\n";
const VENDOR_TOKEN: &str = "vendor-token-0123456789abc";
const STRANGER_TOKEN: &str = "stranger-token-0123456789";

/// A raw SendMessage to the hub's routed endpoint `/a2a/` as the peer holding `token`.
fn routed_send(up: &Up, token: &str, text: &str, context: &str) -> (u16, Value) {
    let answer = routed_send_answer(up, token, text, context);
    (answer.status, answer.body)
}

fn routed_send_answer(up: &Up, token: &str, text: &str, context: &str) -> common::Answer {
    let auth = format!("Bearer {token}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": format!("m-{context}-{text}"), "role": "ROLE_USER", "contextId": context,
        "parts": [{"text": text}],
    }}});
    http(
        up.addr,
        "POST",
        "/a2a/",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

/// The ErrorInfo of a refusal at the door.
fn error_info(body: &Value) -> &Value {
    &body["error"]["data"][0]
}

#[test]
fn peers_are_routed_by_bindings_and_admitted_by_the_inbound_policy() {
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: research\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n    - id: writer\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n",
        common::sdk_echo_agent().display()
    );
    let bindings = "bindings:\n  - agentId: research\n    match: {channel: a2a, peer: {kind: direct, id: partner}}\n  - agentId: main\n    match: {channel: a2a, peer: {kind: direct, id: vendor}}\n  - agentId: writer\n    match: {channel: a2a}\n";
    let up = Up::start_config(&agents, ROUTED_CHANNELS, bindings, |c| {
        c.env("PARTNER_TOKEN", TOKEN)
            .env("VENDOR_TOKEN", VENDOR_TOKEN)
            .env("STRANGER_TOKEN", STRANGER_TOKEN);
    });
    up.wait_for("the echo agents ready", |doc| {
        ["research", "writer"]
            .iter()
            .all(|id| Up::runtime(doc, id).is_some_and(|r| r["status"] == "ready"))
    });
    let root = format!("http://{}/", up.addr);

    // The hub's card: its endpoint routes; its skills are the exposed agents.
    let card = one(&["card", &root, TOKEN]);
    assert_eq!(card["name"], "deepcli hub", "{card:#}");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        format!("http://{}/a2a/", up.addr)
    );
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(skills, ["research", "writer"]);

    // `partner` is bound to `research`: the SDK, given the hub's URL, reaches it.
    let task = one(&["send", &root, TOKEN, "hello", "p1"]);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    assert!(!transcript(&up.state, "agent:research:a2a:partner:p1").is_empty());
    // A blocking send that completed says the hub's own share and the agent's turn.
    let answer = routed_send_answer(&up, TOKEN, "timed", "p1");
    assert_eq!(answer.status, 200, "{:#}", answer.body);
    let timing = answer.server_timing.unwrap_or_default();
    assert!(
        timing.starts_with("hub;dur=") && timing.contains(", agent;dur="),
        "{timing:?}"
    );
    // The routed endpoint finds the peer's task again.
    let got = one(&["get", &root, TOKEN, task["id"].as_str().unwrap()]);
    assert_eq!(got["id"], task["id"], "{got:#}");

    // `vendor` is bound to `main`, which is not exposed: refused, saying which binding.
    let (status, body) = routed_send(&up, VENDOR_TOKEN, "hi", "v1");
    assert_eq!(status, 403, "{body:#}");
    assert_eq!(error_info(&body)["reason"], "PERMISSION_DENIED");
    assert_eq!(error_info(&body)["metadata"]["agent"], "main", "{body:#}");
    assert_eq!(error_info(&body)["metadata"]["matchedBy"], "binding.peer");
    // Its own endpoints stay open to it.
    let task = one(&["send", &base(&up, "writer"), VENDOR_TOKEN, "direct", "v2"]);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");

    // `stranger` is not in `allowFrom`: refused by the policy at both endpoints, naming the
    // setting and its line.
    for path in ["/a2a/", "/a2a/writer/"] {
        let auth = format!("Bearer {STRANGER_TOKEN}");
        let answer = http(
            up.addr,
            "POST",
            path,
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
            br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#,
        );
        assert_eq!(answer.status, 403, "{path}: {:#}", answer.body);
        let info = error_info(&answer.body);
        assert_eq!(info["metadata"]["gate"], "dm-not-allowed", "{info:#}");
        assert_eq!(
            info["metadata"]["rule"],
            "channels.a2a.allowFrom (channels.yaml:4)"
        );
    }
    let sdk = fails(&["send", &root, STRANGER_TOKEN, "hi"]);
    assert!(
        sdk["error"].as_str().unwrap().contains("inbound policy"),
        "{sdk:#}"
    );

    // Pairing: the stranger is given a code; the operator approves it; the stranger speaks,
    // routed by the channel-wide binding to `writer`.
    up.write_by_rename(
        "channels.yaml",
        &ROUTED_CHANNELS.replace("dmPolicy: allowlist", "dmPolicy: pairing"),
    );
    let code = std::cell::RefCell::new(None);
    common::wait_until("the stranger is given a pairing code", || {
        let (status, body) = routed_send(&up, STRANGER_TOKEN, "hi", "s1");
        let info = error_info(&body);
        if status == 403 && info["metadata"]["gate"] == "pairing-required" {
            *code.borrow_mut() = info["metadata"]["pairingCode"].as_str().map(str::to_string);
            return true;
        }
        false
    });
    let code = code
        .into_inner()
        .expect("a pairing code on the first refusal");
    let out = up.deepcli(&["pairing", "approve", "a2a", &code]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let task = one(&["send", &root, STRANGER_TOKEN, "paired", "s2"]);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    assert!(!transcript(&up.state, "agent:writer:a2a:stranger:s2").is_empty());

    // Nothing refused reached a runtime, and the refusals are counted.
    assert!(transcript(&up.state, "agent:writer:a2a:stranger:s1").is_empty());
    let status = up.status().unwrap();
    assert!(
        status["a2a"]["refused"]["gated"].as_u64().unwrap() >= 4,
        "{status:#}"
    );
    assert!(
        status["a2a"]["sendOverhead"]["samples"].as_u64().unwrap() >= 4,
        "{status:#}"
    );
}

#[test]
fn a_remote_a2a_agents_turns_count_against_its_budget() {
    let remote = RemoteAgent::start(&[("A2A_REMOTE_TOKEN", "remote-secret-token")]);
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n      budgets: {{turnsPerHour: 1}}\n",
        remote.url()
    );
    let up = Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", "remote-secret-token");
    });
    up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let first = sessions(&up, &["send", "agent:remote:main", "hello"]);
    assert_eq!(
        first["reply"], "remote: hello (context turn 1)",
        "{first:#}"
    );
    // The hour's one turn is spent: the second is refused before it reaches the remote.
    let second = sessions(&up, &["send", "agent:remote:main", "again"]);
    assert_eq!(second["status"], "error", "{second:#}");
    assert!(
        second["error"]
            .as_str()
            .unwrap_or_default()
            .contains("over its budget turnsPerHour: 1 of 1"),
        "{second:#}"
    );
    // With room in the budget again, the next message is the remote's second turn in the
    // context: the refused one never reached it.
    up.write_by_rename(
        "agents.yaml",
        &agents.replace("turnsPerHour: 1", "turnsPerHour: 5"),
    );
    let third = std::cell::RefCell::new(Value::Null);
    common::wait_until("the larger budget in force", || {
        let said = sessions(&up, &["send", "agent:remote:main", "third"]);
        let ok = said["status"] != "error";
        *third.borrow_mut() = said;
        ok
    });
    let third = third.into_inner();
    assert_eq!(
        third["reply"], "remote: third (context turn 2)",
        "{third:#}"
    );
}

/// A peer's `SubscribeToTask` over raw HTTP, left open: the connection and the head of the
/// answer (status line and headers).
fn open_subscription(addr: std::net::SocketAddr, task_id: &str) -> (std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}})
            .to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /a2a/sdk/ HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        got.push(byte[0]);
    }
    (stream, String::from_utf8_lossy(&got).into_owned())
}

#[test]
fn a_retried_message_id_gets_its_task_back_and_a_peers_streams_are_capped() {
    let channels = "a2a:\n  expose: [sdk]\n  maxStreams: 5\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n      maxStreams: 1\n";
    // The echo agent unsandboxed: this test is about the A2A door, and runs where the ACP
    // SDK peers are linked from outside the checkout.
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      sandbox: {{mode: off}}\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        common::sdk_echo_agent().display()
    );
    let up = Up::start_config(&agents, channels, "bindings: []\n", |c| {
        c.env("PARTNER_TOKEN", TOKEN);
    });
    up.wait_for("the echo agent ready", |doc| {
        Up::runtime(doc, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    // `slow` keeps its task working until it is canceled.
    let send = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "retried-1", "role": "ROLE_USER", "parts": [{"text": "slow"}]},
            "configuration": {"returnImmediately": true},
        }}),
    )
    .unwrap();
    let (status, first) = rpc(&up, &send, &[]);
    assert_eq!(status, 200, "{first:#}");
    let task_id = first["result"]["task"]["id"].as_str().unwrap().to_string();
    // The retry (say, after a timeout on the peer's side) is the same task, not a second run.
    let (_, again) = rpc(&up, &send, &[]);
    assert_eq!(again["result"]["task"]["id"], task_id, "{again:#}");
    let status = up.status().unwrap();
    assert_eq!(status["a2a"]["tasks"], 1, "{status:#}");
    let runs = http(
        up.addr,
        "GET",
        "/v1/runs",
        &[("authorization", &format!("Bearer {}", token(&up)))],
        b"",
    );
    assert_eq!(
        runs.body["runs"].as_array().unwrap().len(),
        1,
        "{:#}",
        runs.body
    );

    // One stream open: the peer's second is refused, 429 TOO_MANY_STREAMS.
    let (held, head) = open_subscription(up.addr, &task_id);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let subscribe = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}),
    )
    .unwrap();
    let (status, refused) = rpc(&up, &subscribe, &[]);
    assert_eq!(status, 429, "{refused:#}");
    assert_eq!(
        error_info(&refused)["reason"],
        "TOO_MANY_STREAMS",
        "{refused:#}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maxStreams"),
        "{refused:#}"
    );
    assert_eq!(up.status().unwrap()["a2a"]["refused"]["tooManyStreams"], 1);
    // The peer goes away: its slot is given back.
    drop(held);
    common::wait_until("the stream's slot given back", || {
        up.status().unwrap()["a2a"]["streams"] == 0
    });
    let (again, head) = open_subscription(up.addr, &task_id);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(again);
    let cancel = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": task_id}}),
    )
    .unwrap();
    let (_, canceled) = rpc(&up, &cancel, &[]);
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled:#}"
    );
}

/// A remote A2A agent (`runtime.kind: a2a`) bound to a chat answers in it like an `acp` one
/// (tasks.md, "Mixed runtimes in one room"): the person's message is its prompt, in a context
/// per conversation, and its answer is the chat's reply; a second message continues the same
/// context.
#[test]
fn a_remote_a2a_agent_answers_in_a_chat_room() {
    answers_in_a_chat_room("JSONRPC");
}

/// The same over HTTP+JSON, the binding a remote whose card offers no JSON-RPC is spoken to
/// in (issue 38).
#[test]
fn a_remote_a2a_agent_on_http_json_answers_in_a_chat_room() {
    answers_in_a_chat_room("HTTP+JSON");
}

fn answers_in_a_chat_room(binding: &str) {
    let wire = if binding == "HTTP+JSON" {
        "rest"
    } else {
        "jsonrpc"
    };
    let remote = RemoteAgent::start(&[
        ("A2A_REMOTE_TOKEN", "remote-secret-token"),
        ("A2A_REMOTE_BINDING", wire),
    ]);
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n",
        remote.url()
    );
    let channels = common::open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: remote, match: {channel: slack}}\n";
    let up = Up::start_config(&agents, &channels, bindings, |c| {
        c.env("REMOTE_TOKEN", "remote-secret-token")
            .env("HOOK", "room-secret");
    });
    let ready = up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let shown = &Up::runtime(&ready, "remote").unwrap()["info"]["card"]["protocolBinding"];
    assert_eq!(shown, binding, "{ready:#}");
    let say = |id: &str, text: &str| -> Value {
        let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": "room"},
            "messageId": id, "sender": {"id": "u1", "name": "Ada"}, "text": text});
        let (status, answer) = common::signed_inbound(up.addr, b"room-secret", &envelope);
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let first = say("m-1", "hello remote");
    let reply = first["reply"]["text"].as_str().unwrap_or_default();
    assert!(
        reply.starts_with("remote: ")
            && reply.contains("hello remote")
            && reply.ends_with("(context turn 1)"),
        "{first:#}"
    );
    let second = say("m-2", "and again");
    let reply = second["reply"]["text"].as_str().unwrap_or_default();
    assert!(
        reply.ends_with("(context turn 2)"),
        "the same context: {second:#}"
    );
    let kept = transcript(&up.state, "agent:remote:slack:group:room");
    assert!(
        kept.iter()
            .any(|(from, t)| from == "agent" && t.contains("hello remote")),
        "{kept:?}"
    );
}

/// SendMessage honours `configuration.historyLength`, and every parameter is read in both of
/// ProtoJSON's spellings (issue 38: `context_id` was ignored, so a ListTasks for one context
/// returned every task of the peer).
#[test]
fn send_honours_history_length_and_params_read_in_both_spellings() {
    let up = up();
    let call = |method: &str, params: Value| {
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
        .unwrap();
        let (status, answer) = rpc(&up, &body, &[]);
        assert_eq!(status, 200, "{answer:#}");
        assert!(answer.get("error").is_none(), "{answer:#}");
        answer["result"].clone()
    };
    let send = |id: &str, context: Option<&str>, configuration: Value| {
        let mut message = json!({"message_id": id, "role": "ROLE_USER", "parts": [{"text": id}]});
        if let Some(context) = context {
            message["context_id"] = context.into();
        }
        call(
            "SendMessage",
            json!({"message": message, "configuration": configuration}),
        )["task"]
            .clone()
    };
    let first = send("first", None, json!({"historyLength": 0}));
    assert!(first.get("history").is_none(), "{first:#}");
    let context = first["contextId"].as_str().unwrap().to_string();
    let second = send("second", Some(&context), json!({"history_length": 1}));
    assert_eq!(second["contextId"], context.as_str(), "{second:#}");
    assert_eq!(
        second["history"].as_array().map(Vec::len),
        Some(1),
        "{second:#}"
    );
    let all = send("third", Some(&context), json!({}));
    assert!(all["history"].as_array().unwrap().len() >= 2, "{all:#}");
    send("elsewhere", None, json!({}));

    let listed = call("ListTasks", json!({"context_id": context, "page_size": 10}));
    let tasks = listed["tasks"].as_array().unwrap();
    assert!(!tasks.is_empty(), "{listed:#}");
    assert!(
        tasks.iter().all(|t| t["contextId"] == context.as_str()),
        "only the asked context: {listed:#}"
    );
    let both = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
        "params": {"contextId": "a", "context_id": "b"}}))
    .unwrap();
    let (_, refused) = rpc(&up, &both, &[]);
    assert_eq!(refused["error"]["code"], -32602, "{refused:#}");
}

/// The HTTP+JSON binding's errors as A2A 1.0 has them: a `google.rpc.Status` with the HTTP status
/// of A2A's table and an `ErrorInfo` naming the A2A error; the door's refusals in the same shape.
#[test]
fn the_http_json_binding_answers_errors_as_google_rpc_status() {
    let up = up();
    let auth = format!("Bearer {TOKEN}");
    let get = |path: &str, token: &str| {
        common::http(up.addr, "GET", path, &[("authorization", token)], b"")
    };
    let post = |path: &str, body: &str| {
        common::http(
            up.addr,
            "POST",
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/a2a+json"),
            ],
            body.as_bytes(),
        )
    };
    let reason = |body: &Value| body["error"]["details"][0]["reason"].clone();

    // A send answers the result itself, no JSON-RPC envelope.
    let sent = post(
        "/a2a-rest/agents/sdk/message:send",
        r#"{"message":{"messageId":"r-1","role":"ROLE_USER","parts":[{"text":"hi"}]}}"#,
    );
    assert_eq!(sent.status, 200, "{:#}", sent.body);
    let task_id = sent.body["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(sent.body["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let got = get(
        &format!("/a2a-rest/agents/sdk/tasks/{task_id}?historyLength=1"),
        &auth,
    );
    assert_eq!(got.status, 200);
    assert_eq!(got.body["id"], task_id.as_str());
    assert_eq!(
        got.body["history"].as_array().unwrap().len(),
        1,
        "{:#}",
        got.body
    );

    // An unknown task: 404, TASK_NOT_FOUND.
    let missing = get("/a2a-rest/agents/sdk/tasks/nope", &auth);
    assert_eq!(missing.status, 404, "{:#}", missing.body);
    assert_eq!(missing.body["error"]["status"], "NOT_FOUND");
    assert_eq!(reason(&missing.body), "TASK_NOT_FOUND");
    assert_eq!(
        missing.body["error"]["details"][0]["domain"],
        "a2a-protocol.org"
    );
    // A finished task cannot be cancelled: 400, TASK_NOT_CANCELABLE.
    let cancel = post(&format!("/a2a-rest/agents/sdk/tasks/{task_id}:cancel"), "");
    assert_eq!(cancel.status, 400, "{:#}", cancel.body);
    assert_eq!(reason(&cancel.body), "TASK_NOT_CANCELABLE");
    // Parameters as the JSON-RPC binding takes them, refused alike.
    let bad = get("/a2a-rest/agents/sdk/tasks?pageSize=0", &auth);
    assert_eq!(bad.status, 400, "{:#}", bad.body);
    assert_eq!(bad.body["error"]["status"], "INVALID_ARGUMENT");
    let twice = get("/a2a-rest/agents/sdk/tasks?pageSize=1&pageSize=2", &auth);
    assert_eq!(twice.status, 400, "{:#}", twice.body);
    // A push config's target is checked (a2a_push.rs): a refusal is 400 INVALID_ARGUMENT.
    let push = post(
        &format!("/a2a-rest/agents/sdk/tasks/{task_id}/pushNotificationConfigs"),
        r#"{"url":"http://127.0.0.1:9/hook"}"#,
    );
    assert_eq!(push.status, 400, "{:#}", push.body);
    assert_eq!(push.body["error"]["status"], "INVALID_ARGUMENT");
    let push = get(
        &format!("/a2a-rest/agents/sdk/tasks/{task_id}/pushNotificationConfigs/nope"),
        &auth,
    );
    assert_eq!(push.status, 404, "{:#}", push.body);
    assert_eq!(reason(&push.body), "TASK_NOT_FOUND");
    let card = get("/a2a-rest/agents/sdk/extendedAgentCard", &auth);
    assert_eq!(card.status, 200, "{:#}", card.body);
    assert_eq!(card.body["name"], "Echo");
    // The door: no token, 401 UNAUTHENTICATED; another peer's agent, 403.
    let stranger = get("/a2a-rest/agents/sdk/tasks", "Bearer wrong");
    assert_eq!(stranger.status, 401, "{:#}", stranger.body);
    assert_eq!(stranger.body["error"]["status"], "UNAUTHENTICATED");
    let narrow = get(
        "/a2a-rest/agents/sdk/tasks",
        &format!("Bearer {OTHER_TOKEN}"),
    );
    assert_eq!(narrow.status, 403, "{:#}", narrow.body);
    assert_eq!(narrow.body["error"]["status"], "PERMISSION_DENIED");
    // The hub's own base routes by bindings.yaml: here to `main`, which is not exposed.
    let routed = get("/a2a-rest/tasks", &auth);
    assert_eq!(routed.status, 403, "{:#}", routed.body);
    assert_eq!(
        routed.body["error"]["details"][0]["metadata"]["agent"],
        "main"
    );
}

/// `deepcli tasks show TASK --json`.
fn task_shown(up: &Up, id: &str) -> Value {
    let out = up.deepcli(&["tasks", "show", id, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An A2A peer's task is a deepcli task (issue 37): made when the peer's message starts it
/// (requester the peer, the agent its owner and assignee, in the A2A session), its state
/// following the A2A task's (input-required → awaiting_input with the question, the answer
/// → working, completed → submitted with the reply), the raw A2A state beside; `tasks list`
/// and `audit --task` show it; a person accepts or rejects it as it is (never reopened), and
/// to the peer it stays completed.
#[test]
fn a_peers_a2a_task_is_a_deepcli_task_that_follows_its_states() {
    let up = up();
    let url = base(&up, "sdk");
    let asked = one(&[
        "send",
        &url,
        TOKEN,
        "reply: Which city?\\nINPUT_REQUIRED",
        "trip",
    ]);
    let a2a_id = asked["id"].as_str().unwrap().to_string();
    let id = format!("task-{a2a_id}");
    let task = task_shown(&up, &id);
    assert_eq!(task["state"], "awaiting_input", "{task:#}");
    assert_eq!(
        task["runtimeState"], "TASK_STATE_INPUT_REQUIRED",
        "{task:#}"
    );
    assert_eq!(task["requester"], "a2a:partner", "{task:#}");
    assert_eq!(task["owner"], "sdk");
    assert_eq!(task["assignee"], "sdk");
    assert_eq!(task["sessionKey"], "agent:sdk:a2a:partner:trip", "{task:#}");
    assert_eq!(
        task["title"], "reply: Which city?\\nINPUT_REQUIRED",
        "{task:#}"
    );
    let asked_event = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "asked")
        .unwrap_or_else(|| panic!("{task:#}"));
    assert_eq!(asked_event["detail"]["question"], "Which city?");
    assert_eq!(asked_event["actor"], "agent:sdk");
    assert_eq!(asked_event["door"], "a2a");

    let done = one(&["send", &url, TOKEN, "Paris", "trip", &a2a_id]);
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done:#}");
    common::wait_until("the deepcli task submitted", || {
        task_shown(&up, &id)["state"] == "submitted"
    });
    let task = task_shown(&up, &id);
    assert_eq!(task["runtimeState"], "TASK_STATE_COMPLETED", "{task:#}");
    let kinds: Vec<&str> = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["created", "asked", "answered", "submitted"],
        "{task:#}"
    );
    let submitted = &task["events"][3];
    assert!(
        submitted["detail"]["summary"]
            .as_str()
            .unwrap()
            .ends_with("Paris (turn 2)"),
        "{task:#}"
    );
    assert_eq!(task["events"][2]["actor"], "a2a:partner", "{task:#}");
    let steps: Vec<&str> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["runId"].as_str())
        .collect();
    assert_eq!(steps.len(), 2, "each message a step with its run: {task:#}");

    let listed = up.deepcli(&["tasks", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["taskId"] == id.as_str()),
        "{listed:#}"
    );
    let story = up.deepcli(&["audit", "--task", &id]);
    let story = String::from_utf8_lossy(&story.stdout).to_string();
    assert!(
        story.contains("asked by agent:sdk via a2a: open → awaiting_input"),
        "{story}"
    );

    // A person accepts it as it is: to the peer it stays completed.
    let accepted = up.deepcli(&["tasks", "accept", &id]);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    assert_eq!(task_shown(&up, &id)["state"], "accepted");
    let got = one(&["get", &url, TOKEN, &a2a_id]);
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got:#}");

    // Another: a rejection that would reopen it is refused (A2A reopens nothing); one that
    // closes it is taken.
    let other = one(&["send", &url, TOKEN, "hello"]);
    let other_id = format!("task-{}", other["id"].as_str().unwrap());
    common::wait_until("the second deepcli task submitted", || {
        task_shown(&up, &other_id)["state"] == "submitted"
    });
    let reopen = up.deepcli(&["tasks", "reject", &other_id, "not this"]);
    assert!(!reopen.status.success());
    assert!(
        String::from_utf8_lossy(&reopen.stderr).contains("A2A never reopens one"),
        "{}",
        String::from_utf8_lossy(&reopen.stderr)
    );
    let closed = up.deepcli(&["tasks", "reject", &other_id, "not this", "--close"]);
    assert!(
        closed.status.success(),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );
    assert_eq!(task_shown(&up, &other_id)["state"], "rejected");
}

/// `tool` called with `args` from session `key` (the echo agent runs an `mcp` line as a
/// call): the tool's result.
fn tool_from(up: &Up, key: &str, tool: &str, args: Value) -> Value {
    let out = up.deepcli(&["sessions", "send", key, &format!("mcp {tool} {args}")]);
    let reply = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let json = reply
        .strip_prefix("mcp: ")
        .unwrap_or_else(|| panic!("the tool call failed: {reply}"));
    serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {reply}"))
}

/// A task given to a remote A2A agent (issue 37): its title and acceptance go to the remote
/// as a message in the task's own A2A context; the remote's input-required is the task's
/// question (awaiting_input), the owner's answer the next message in the same context, its
/// completed the task's submitted result, the raw A2A state kept beside.
#[test]
fn a_task_given_to_a_remote_a2a_agent_asks_and_submits_by_its_a2a_states() {
    let remote = RemoteAgent::start(&[("A2A_REMOTE_TOKEN", "remote-secret-token")]);
    let up = remote_up(&remote);
    up.wait_for("the remote ready and the echo agent ready", |doc| {
        ["remote", "sdk"]
            .iter()
            .all(|id| Up::runtime(doc, id).is_some_and(|r| r["status"] == "ready"))
    });
    let created = tool_from(
        &up,
        "agent:sdk:main",
        "tasks_create",
        json!({"agentId": "remote", "title": "ask", "acceptance": "it picks one"}),
    );
    let id = created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created:#}"))
        .to_string();
    common::wait_until("the remote's question", || {
        task_shown(&up, &id)["state"] == "awaiting_input"
    });
    let task = task_shown(&up, &id);
    assert_eq!(
        task["runtimeState"], "TASK_STATE_INPUT_REQUIRED",
        "{task:#}"
    );
    let asked = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "asked")
        .unwrap_or_else(|| panic!("{task:#}"));
    assert_eq!(asked["detail"]["question"], "which one?", "{task:#}");
    assert_eq!(asked["actor"], "agent:remote", "{task:#}");

    let answered = tool_from(
        &up,
        "agent:sdk:main",
        "tasks_update",
        json!({"taskId": id, "action": "answer", "text": "the red one"}),
    );
    assert_eq!(answered["state"], "working", "{answered:#}");
    common::wait_until("the remote's result", || {
        task_shown(&up, &id)["state"] == "submitted"
    });
    let task = task_shown(&up, &id);
    assert_eq!(task["runtimeState"], "TASK_STATE_COMPLETED", "{task:#}");
    let summary = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["kind"] == "submitted")
        .and_then(|e| e["detail"]["summary"].as_str())
        .unwrap_or_else(|| panic!("{task:#}"))
        .to_string();
    // The answer went in the same context as the brief, in the task that asked: the remote's
    // second turn there, continuing that task (A2A: the message names the task).
    assert!(
        summary.starts_with("remote: ") && summary.ends_with("(context turn 2, task continued)"),
        "{summary}"
    );
    assert!(summary.contains("the red one"), "{summary}");

    // Its file parts are the task's artifacts: inline bytes stored by their hash, a URL
    // recorded in the summary and not fetched.
    let created = tool_from(
        &up,
        "agent:sdk:main",
        "tasks_create",
        json!({"agentId": "remote", "title": "files", "acceptance": "it sends a file"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    common::wait_until("the remote's files", || {
        task_shown(&up, &id)["state"] == "submitted"
    });
    let task = task_shown(&up, &id);
    let hello = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"hello"));
    assert_eq!(
        task["artifacts"],
        json!([{"name": "r.txt", "sha256": hello, "size": 5, "handedInBy": "remote", "at": task["artifacts"][0]["at"]}]),
        "{task:#}"
    );
    let stored = up.state.join(format!("artifacts/{id}/{hello}"));
    assert_eq!(std::fs::read(stored).unwrap(), b"hello");
    let summary = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "submitted")
        .and_then(|e| e["detail"]["summary"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        summary.contains("at https://files.example/big.bin — not fetched by deepcli]"),
        "{summary}"
    );
    assert!(
        summary.contains("[deepcli: `r.txt` kept as an artifact of the task (5 bytes"),
        "{summary}"
    );
}
