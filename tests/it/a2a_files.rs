//! File parts over A2A (docs/a2a.md, "Files"), with the official SDKs as peers: a peer's file
//! reaches the agent (the ACP SDK echo agent) in its workspace; the agent hands a file back with
//! artifacts_put and the peer gets it as a file part with the same bytes — inline, or at a URL
//! only that peer may GET; the limits answered `-32602` with an ErrorInfo; a traversal filename
//! kept inside the agent's directory; a peer that takes only text/plain gets no file part.

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{self, Up, http};

const TOKEN: &str = "partner-token-0123456789";
const OTHER_TOKEN: &str = "other-peer-token-9876543210";

fn up() -> Up {
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        common::sdk_echo_agent().display()
    );
    let channels = "a2a:\n  expose: [sdk]\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n    other:\n      token: {source: env, id: OTHER_TOKEN}\n";
    let up = Up::start_config(&agents, channels, "bindings: []\n", |c| {
        c.env("PARTNER_TOKEN", TOKEN)
            .env("OTHER_TOKEN", OTHER_TOKEN);
    });
    up.wait_for("the echo agent ready", |doc| {
        Up::runtime(doc, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    up
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn b64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap_or_else(|e| panic!("{e}: {text:.80}"))
}

/// Bytes that are not text (so they travel as `application/octet-stream` unless named).
fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// The agent's reply lines `files-back: <path> <sha256> <artifacts_put's result>`.
fn files_back(reply: &str) -> Vec<(String, String, Value)> {
    reply
        .lines()
        .filter_map(|l| l.strip_prefix("files-back: "))
        .map(|l| {
            let mut it = l.splitn(3, ' ');
            let (path, sha, result) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            let result: Value = serde_json::from_str(result).unwrap();
            let result = match result {
                Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                other => other,
            };
            (path.to_string(), sha.to_string(), result)
        })
        .collect()
}

/// The reply artifact's text and the file artifacts of a task (ProtoJSON, 1.0).
fn artifacts(task: &Value) -> (String, Vec<Value>) {
    let list = task["artifacts"].as_array().cloned().unwrap_or_default();
    let reply = list
        .iter()
        .find(|a| a["name"] == "reply")
        .and_then(|a| a["parts"][0]["text"].as_str())
        .unwrap_or_default()
        .to_string();
    let files = list.into_iter().filter(|a| a["name"] != "reply").collect();
    (reply, files)
}

fn write_temp(bytes: &[u8]) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    file
}

/// A file sent by the JS SDK over `transport` reaches the agent, which hands it back: the
/// peer's task holds it as a file part with the same bytes.
fn js_round_trip(up: &Up, transport: &str) {
    let sent = payload(256 * 1024, 7);
    let file = write_temp(&sent);
    let (ok, docs) = crate::a2a::client_over(
        transport,
        &[
            "send-file",
            &format!("http://{}/a2a/sdk/", up.addr),
            TOKEN,
            "files-back",
            file.path().to_str().unwrap(),
            "data.bin",
            "application/octet-stream",
        ],
    );
    assert!(ok, "{transport}: {docs:#?}");
    let task = &docs[0];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    let (reply, files) = artifacts(task);
    let back = files_back(&reply);
    let id = task["id"].as_str().unwrap();
    // The agent read the peer's bytes from its workspace, where the hub wrote them.
    assert_eq!(back.len(), 1, "{reply}");
    assert_eq!(back[0].0, format!(".deepcli/a2a/{id}/data.bin"));
    assert_eq!(back[0].1, sha256(&sent), "the agent saw other bytes");
    assert_eq!(back[0].2["sha256"], sha256(&sent), "{reply}");
    let on_disk = up.state.join("workspaces/sdk").join(&back[0].0);
    assert_eq!(std::fs::read(&on_disk).unwrap(), sent);
    // The peer got the handed-in file back, inline.
    assert_eq!(files.len(), 1, "{task:#}");
    let part = &files[0]["parts"][0];
    assert_eq!(files[0]["name"], "back/data.bin");
    assert_eq!(part["filename"], "back/data.bin");
    assert_eq!(part["mediaType"], "application/octet-stream");
    assert_eq!(sha256(&b64(part["raw"].as_str().unwrap())), sha256(&sent));
    // The peer's A2A task is a deepcli task: the file is its artifact, too (issue 37).
    let out = up.deepcli(&["tasks", "show", &format!("task-{id}"), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["artifacts"][0]["name"], "back/data.bin", "{shown:#}");
    assert_eq!(
        shown["artifacts"][0]["sha256"],
        sha256(&sent).as_str(),
        "{shown:#}"
    );
    assert_eq!(
        back[0].2["taskId"],
        format!("task-{id}").as_str(),
        "{reply}"
    );
}

#[test]
fn a_file_round_trips_through_the_agent_with_the_js_sdk_over_both_bindings() {
    let up = up();
    js_round_trip(&up, "jsonrpc");
    js_round_trip(&up, "rest");
    // Streamed: the file comes as an artifactUpdate of its own.
    let sent = b"hello, file\n".to_vec();
    let file = write_temp(&sent);
    let (ok, events) = crate::a2a::client_over(
        "jsonrpc",
        &[
            "stream-file",
            &format!("http://{}/a2a/sdk/", up.addr),
            TOKEN,
            "files-back",
            file.path().to_str().unwrap(),
            "hello.txt",
            "text/plain",
        ],
    );
    assert!(ok, "{events:#?}");
    let part = events
        .iter()
        .filter_map(|e| e.get("artifactUpdate"))
        .find(|u| u["artifact"]["name"] == "back/hello.txt")
        .map(|u| u["artifact"]["parts"][0].clone())
        .unwrap_or_else(|| panic!("no file artifact: {events:#?}"));
    assert_eq!(part["mediaType"], "text/plain");
    assert_eq!(b64(part["raw"].as_str().unwrap()), sent);
}

#[test]
fn a_file_round_trips_with_the_python_sdk_over_json_rpc_and_http_json() {
    let up = up();
    let sent = payload(64 * 1024, 3);
    let file = write_temp(&sent);
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let docs = super::a2a::python_client(&[
            binding,
            &format!("http://{}/a2a/sdk/", up.addr),
            TOKEN,
            "files-back",
            file.path().to_str().unwrap(),
            "py.bin",
            "application/octet-stream",
        ]);
        let task = &docs.last().unwrap()["task"];
        assert_eq!(
            task["status"]["state"], "TASK_STATE_COMPLETED",
            "{binding}: {task:#}"
        );
        let (reply, files) = artifacts(task);
        let back = files_back(&reply);
        assert_eq!(back.len(), 1, "{binding}: {reply}");
        assert_eq!(
            back[0].1,
            sha256(&sent),
            "{binding}: the agent saw other bytes"
        );
        assert_eq!(files.len(), 1, "{binding}: {task:#}");
        let raw = files[0]["parts"][0]["raw"].as_str().unwrap();
        assert_eq!(sha256(&b64(raw)), sha256(&sent), "{binding}");
    }
}

fn rpc(up: &Up, token: &str, body: &Value) -> common::Answer {
    let auth = format!("Bearer {token}");
    http(
        up.addr,
        "POST",
        "/a2a/sdk/",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn send(parts: Value, configuration: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": parts},
        "configuration": configuration,
    }})
}

#[test]
fn files_over_the_limits_are_refused_with_error_info_and_reach_no_agent() {
    let up = up();
    let encode = |n: usize| base64::engine::general_purpose::STANDARD.encode(payload(n, 1));
    // One file over 512 KiB (its body within the 1 MiB limit).
    let answer = rpc(
        &up,
        TOKEN,
        &send(
            json!([{"text": "files-back"}, {"raw": encode(600 * 1024)}]),
            json!({}),
        ),
    );
    assert_eq!(answer.status, 200);
    let error = &answer.body["error"];
    assert_eq!(error["code"], -32602, "{error:#}");
    assert_eq!(error["data"][0]["reason"], "FILE_TOO_LARGE", "{error:#}");
    assert_eq!(error["data"][0]["domain"], "deepcli");
    assert_eq!(error["data"][0]["metadata"]["limitBytes"], "524288");
    // Two that are over it together.
    let half = encode(300 * 1024);
    let answer = rpc(
        &up,
        TOKEN,
        &send(json!([{"raw": half}, {"raw": half}]), json!({})),
    );
    assert_eq!(answer.body["error"]["data"][0]["reason"], "FILE_TOO_LARGE");
    // The HTTP+JSON binding: 400 INVALID_ARGUMENT with the same ErrorInfo.
    let auth = format!("Bearer {TOKEN}");
    let body = send(json!([{"raw": encode(600 * 1024)}]), json!({}))["params"].clone();
    let answer = http(
        up.addr,
        "POST",
        "/a2a-rest/agents/sdk/message:send",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(answer.status, 400, "{:#}", answer.body);
    assert_eq!(answer.body["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(
        answer.body["error"]["details"][0]["reason"],
        "FILE_TOO_LARGE"
    );
    // None reached the agent: no task, nothing written in its workspace.
    let listed = rpc(
        &up,
        TOKEN,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}),
    );
    assert_eq!(
        listed.body["result"]["tasks"],
        json!([]),
        "{:#}",
        listed.body
    );
    assert!(!up.state.join("workspaces/sdk/.deepcli/a2a").exists());
}

#[test]
fn a_traversal_filename_lands_inside_the_agents_directory_and_a_url_is_not_fetched() {
    let up = up();
    let answer = rpc(
        &up,
        TOKEN,
        &send(
            json!([
                {"text": "raw"},
                {"raw": "c2VjcmV0", "filename": "../../../../escape.txt", "mediaType": "text/plain"},
                {"kind": "file", "file": {"uri": "http://169.254.169.254/latest/meta-data", "name": "meta"}},
            ]),
            json!({}),
        ),
    );
    let task = &answer.body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{:#}",
        answer.body
    );
    let id = task["id"].as_str().unwrap();
    let said = artifacts(task).0;
    let landed = format!(".deepcli/a2a/{id}/escape.txt");
    assert!(
        said.contains(&format!(
            "[file from the peer] {landed} (text/plain, 6 bytes, sha256 {})",
            sha256(b"secret")
        )),
        "{said}"
    );
    assert!(
        said.contains("[file reference from the peer, not fetched by deepcli] http://169.254.169.254/latest/meta-data (`meta`, no media type)"),
        "{said}"
    );
    let ws = up.state.join("workspaces/sdk");
    assert_eq!(std::fs::read(ws.join(&landed)).unwrap(), b"secret");
    for outside in ["escape.txt", "../escape.txt", "../../escape.txt"] {
        assert!(!ws.join(outside).exists(), "{outside}");
    }
}

#[test]
fn a_peer_that_takes_only_text_gets_no_file_part_and_a_large_file_is_a_url_for_that_peer_alone() {
    let up = up();
    // text/plain only: the handed-in file is a text part saying what it is.
    let answer = rpc(
        &up,
        TOKEN,
        &send(
            json!([{"text": "files-back"}, {"raw": base64::engine::general_purpose::STANDARD.encode(payload(100, 9)), "filename": "x.bin"}]),
            json!({"acceptedOutputModes": ["text/plain"]}),
        ),
    );
    let task = &answer.body["result"]["task"];
    let (_, files) = artifacts(task);
    assert_eq!(files.len(), 1, "{task:#}");
    let part = &files[0]["parts"][0];
    assert!(
        part.get("raw").is_none() && part.get("url").is_none(),
        "{part:#}"
    );
    let text = part["text"].as_str().unwrap();
    assert!(
        text.contains("back/x.bin") && text.contains("not sent: this task's acceptedOutputModes (text/plain) do not take application/octet-stream"),
        "{text}"
    );
    assert!(text.contains(&sha256(&payload(100, 9))), "{text}");

    // Over the inline limit: a URL the peer GETs with its own token; another peer cannot.
    let answer = rpc(
        &up,
        TOKEN,
        &send(json!([{"text": "files-back 700"}]), json!({})),
    );
    let task = &answer.body["result"]["task"];
    let (reply, files) = artifacts(task);
    let want = files_back(&reply)
        .into_iter()
        .find(|f| f.0 == "back/big.bin")
        .unwrap_or_else(|| panic!("{reply}"))
        .1;
    let part = &files[0]["parts"][0];
    assert!(part.get("raw").is_none(), "{part:#}");
    let url = part["url"].as_str().unwrap();
    let prefix = format!("http://{}/a2a-rest/agents/sdk/tasks/", up.addr);
    assert!(url.starts_with(&prefix), "{url}");
    let get = |token: &str| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut response = agent
            .get(url)
            .header("authorization", &format!("Bearer {token}"))
            .call()
            .unwrap();
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(8 * 1024 * 1024)
            .read_to_vec()
            .unwrap();
        (status, bytes)
    };
    let (status, bytes) = get(TOKEN);
    assert_eq!(status, 200);
    assert_eq!(bytes.len(), 700 * 1024);
    assert_eq!(sha256(&bytes), want);
    let (status, _) = get(OTHER_TOKEN);
    assert_eq!(status, 404, "another peer's task does not exist for it");
    let (status, _) = get("not-a-token-at-all-0000");
    assert_eq!(status, 401);
}

/// A peer's files reach the agent as the ACP content blocks its `promptCapabilities` take, with
/// the bytes the peer sent: an image as `image`, text as an embedded text resource, other bytes
/// as an embedded blob; to an agent that takes none of them, a `resource_link` to the file in
/// its workspace (ACP's baseline), never the bytes.
#[test]
fn a_peers_files_are_the_content_blocks_the_agent_takes() {
    let agent = common::sdk_echo_agent();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{a}\"]}}\n    - id: rich\n      runtime: {{kind: acp, command: [node, \"{a}\"], env: {{SDK_ECHO_PROMPT_CAPS: \"image,embeddedContext\"}}}}\n",
        a = agent.display()
    );
    let channels = "a2a:\n  expose: [sdk, rich]\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n";
    let up = Up::start_config(&agents, channels, "bindings: []\n", |c| {
        c.env("PARTNER_TOKEN", TOKEN);
    });
    up.wait_for("both agents ready", |doc| {
        ["sdk", "rich"]
            .iter()
            .all(|a| Up::runtime(doc, a).is_some_and(|r| r["status"] == "ready"))
    });
    let png = payload(300, 7);
    let bin = payload(200, 9);
    let enc = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let parts = json!([
        {"text": "blocks"},
        {"raw": enc(&png), "filename": "shot.png", "mediaType": "image/png"},
        {"raw": enc(b"line one\n"), "filename": "notes.txt", "mediaType": "text/plain"},
        {"raw": enc(&bin), "filename": "blob.bin", "mediaType": "application/octet-stream"},
    ]);
    let ask = |agent: &str| {
        let auth = format!("Bearer {TOKEN}");
        let answer = http(
            up.addr,
            "POST",
            &format!("/a2a/{agent}/"),
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
            send(parts.clone(), json!({})).to_string().as_bytes(),
        );
        let task = answer.body["result"]["task"].clone();
        assert_eq!(
            task["status"]["state"], "TASK_STATE_COMPLETED",
            "{:#}",
            answer.body
        );
        let id = task["id"].as_str().unwrap().to_string();
        let reply = artifacts(&task).0;
        let lines: Vec<String> = reply
            .lines()
            .skip_while(|l| *l != "blocks:")
            .skip(1)
            .map(str::to_string)
            .collect();
        (id, lines)
    };
    let uri = |agent: &str, id: &str, name: &str| {
        let ws = std::fs::canonicalize(up.state.join("workspaces").join(agent)).unwrap();
        format!("file://{}/.deepcli/a2a/{id}/{name}", ws.display())
    };

    let (id, lines) = ask("rich");
    assert_eq!(
        lines,
        [
            format!(
                "image image/png {} 300 {}",
                uri("rich", &id, "shot.png"),
                sha256(&png)
            ),
            format!(
                "resource/text text/plain {} 9 {}",
                uri("rich", &id, "notes.txt"),
                sha256(b"line one\n")
            ),
            format!(
                "resource/blob application/octet-stream {} 200 {}",
                uri("rich", &id, "blob.bin"),
                sha256(&bin)
            ),
        ]
    );

    let (id, lines) = ask("sdk");
    assert_eq!(
        lines,
        [
            format!(
                "resource_link image/png {} 300 -",
                uri("sdk", &id, "shot.png")
            ),
            format!(
                "resource_link text/plain {} 9 -",
                uri("sdk", &id, "notes.txt")
            ),
            format!(
                "resource_link application/octet-stream {} 200 -",
                uri("sdk", &id, "blob.bin")
            ),
        ]
    );
}
