//! A2A push notifications and the authenticated extended card (docs/a2a.md, "Push
//! notifications", "The extended card"), driven by the official A2A JavaScript SDK
//! (tests/peers/a2a-client.mjs) against `deepcli up` with the ACP SDK echo agent behind it, and
//! a webhook receiver on loopback that records every request it gets.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::a2a::client_over;
use crate::common::{self, Up, http};

const TOKEN: &str = "partner-token-0123456789";
const OTHER_TOKEN: &str = "other-peer-token-9876543210";

fn agents() -> String {
    format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      identity: {{name: Echo, description: Echoes what it is told.}}\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n    - id: other\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        common::sdk_echo_agent().display(),
        common::sdk_echo_agent().display()
    )
}

/// `partner` may reach both agents and is routed to `sdk`; `narrow` only `other`, where it is
/// routed.
fn channels(push: &str) -> String {
    format!(
        "a2a:\n  expose: [sdk, other]\n{push}  peers:\n    partner:\n      token: {{source: env, id: PARTNER_TOKEN}}\n      maxPushConfigs: 2\n    narrow:\n      token: {{source: env, id: NARROW_TOKEN}}\n      allowAgents: [other]\n      requestsPerMinute: 50\n"
    )
}

const BINDINGS: &str = "bindings:\n  - agentId: sdk\n    match: {channel: a2a, peer: {kind: direct, id: partner}}\n  - agentId: other\n    match: {channel: a2a, peer: {kind: direct, id: narrow}}\n";

const ALLOW_PRIVATE: &str = "  push:\n    allowPrivateTargets: true\n";

fn up(push: &str) -> Up {
    let up = Up::start_config(&agents(), &channels(push), BINDINGS, |c| {
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

fn one(args: &[&str]) -> Value {
    let (ok, docs) = client_over("jsonrpc", args);
    assert!(ok, "{args:?}: {docs:#?}");
    docs.into_iter().next().unwrap()
}

fn fails(args: &[&str]) -> Value {
    let (ok, docs) = client_over("jsonrpc", args);
    assert!(!ok, "{args:?} should fail: {docs:#?}");
    docs.into_iter().next().unwrap()
}

fn base(up: &Up, agent: &str) -> String {
    format!("http://{}/a2a/{agent}/", up.addr)
}

/// One request a webhook got.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    /// Header lines, names in lower case.
    headers: Vec<(String, String)>,
    body: Value,
}

impl Hit {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `statusUpdate TASK_STATE_…` or `artifactUpdate`.
    fn what(&self) -> String {
        if let Some(state) = self.body["statusUpdate"]["status"]["state"].as_str() {
            format!("statusUpdate {state}")
        } else if self.body.get("artifactUpdate").is_some() {
            "artifactUpdate".into()
        } else {
            format!("? {}", self.body)
        }
    }

    fn task_id(&self) -> &str {
        self.body["statusUpdate"]["taskId"]
            .as_str()
            .or_else(|| self.body["artifactUpdate"]["taskId"].as_str())
            .unwrap_or_default()
    }
}

/// How a webhook answers.
#[derive(Debug, Clone, Copy)]
enum Answers {
    Ok,
    /// `302 Found` to another URL (which must never be followed).
    Redirect(std::net::SocketAddr),
    Fail,
}

/// A webhook on loopback: its URL, and every request it got.
struct Webhook {
    url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Webhook {
    fn start(answers: Answers) -> Webhook {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hooks/a2a", listener.local_addr().unwrap());
        let hits = Arc::new(Mutex::new(Vec::new()));
        let recorded = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let Some(hit) = read_request(&stream) else {
                    continue;
                };
                recorded.lock().unwrap().push(hit);
                let answer = match answers {
                    Answers::Ok => "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
                    Answers::Redirect(to) => format!(
                        "HTTP/1.1 302 Found\r\nlocation: http://{to}/elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    ),
                    Answers::Fail => "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
                };
                let mut stream = stream;
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Webhook { url, hits }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// Waits until a request carried `what` for task `task`; every request so far.
    fn wait_for(&self, task: &str, what: &str) -> Vec<Hit> {
        common::wait_until(&format!("the webhook to get {what} of {task}"), || {
            self.hits()
                .iter()
                .any(|h| h.task_id() == task && h.what() == what)
        });
        self.hits()
    }
}

fn read_request(stream: &std::net::TcpStream) -> Option<Hit> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let path = first.split(' ').nth(1)?.to_string();
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':')?;
        let (k, v) = (k.trim().to_lowercase(), v.trim().to_string());
        if k == "content-length" {
            length = v.parse().ok()?;
        }
        headers.push((k, v));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Hit {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// A JSON-RPC call of `peer_token` at `path`: the answer's body.
fn rpc(up: &Up, path: &str, peer_token: &str, method: &str, params: Value) -> Value {
    let auth = format!("Bearer {peer_token}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    http(
        up.addr,
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .body
}

/// The audit's `push` lines.
fn audit_push(up: &Up) -> Vec<Value> {
    let out = up.deepcli(&["audit", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let events = doc
        .as_array()
        .cloned()
        .or_else(|| doc["events"].as_array().cloned())
        .unwrap_or_else(|| panic!("no events: {doc:#}"));
    events.into_iter().filter(|e| e["kind"] == "push").collect()
}

#[test]
fn a_webhook_gets_the_tasks_updates_in_order_with_its_credentials_and_only_its_peer_manages_it() {
    let up = up(ALLOW_PRIVATE);
    let url = base(&up, "sdk");
    let hook = Webhook::start(Answers::Ok);

    // The public card offers push notifications and the extended card.
    let card = one(&["card", &url, TOKEN]);
    assert_eq!(card["capabilities"]["pushNotifications"], true, "{card:#}");
    assert_eq!(card["capabilities"]["extendedAgentCard"], true, "{card:#}");

    // A webhook given with the message (configuration.taskPushNotificationConfig) gets the
    // task's updates, in order, with its credentials and token.
    let task = one(&[
        "push-send",
        &url,
        TOKEN,
        "hello",
        &hook.url,
        "hook-secret-1",
        "tok-1",
    ]);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    let id = task["id"].as_str().unwrap();
    let hits = hook.wait_for(id, "statusUpdate TASK_STATE_COMPLETED");
    let whats: Vec<String> = hits.iter().map(Hit::what).collect();
    assert_eq!(
        whats.last().unwrap(),
        "statusUpdate TASK_STATE_COMPLETED",
        "{whats:?}"
    );
    let artifact = whats.iter().position(|w| w == "artifactUpdate");
    assert_eq!(artifact, Some(whats.len() - 2), "{whats:?}");
    assert!(
        whats[..whats.len() - 2]
            .iter()
            .all(|w| w == "statusUpdate TASK_STATE_WORKING"),
        "{whats:?}"
    );
    for hit in &hits {
        assert_eq!(hit.path, "/hooks/a2a");
        assert_eq!(hit.task_id(), id);
        assert_eq!(hit.header("authorization"), Some("Bearer hook-secret-1"));
        assert_eq!(hit.header("x-a2a-notification-token"), Some("tok-1"));
        assert_eq!(hit.header("content-type"), Some("application/a2a+json"));
    }
    let reply = hits[hits.len() - 2].body["artifactUpdate"]["artifact"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reply.ends_with("hello (turn 1)"), "{reply}");
    let configs = one(&["push-list", &url, TOKEN, id]);
    assert_eq!(
        configs["configs"].as_array().unwrap().len(),
        1,
        "{configs:#}"
    );
    // The credentials are the peer's secret: never shown back.
    assert_eq!(
        configs["configs"][0]["authentication"],
        json!({"scheme": "Bearer"}),
        "{configs:#}"
    );

    // A webhook set on a task waiting for input gets the run of its answer.
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
    let trip = asked["id"].as_str().unwrap();
    let made = one(&[
        "push-create",
        &url,
        TOKEN,
        trip,
        &hook.url,
        "hook-secret-2",
        "cfg-2",
    ]);
    assert_eq!(made["id"], "cfg-2", "{made:#}");
    assert_eq!(made["taskId"], trip, "{made:#}");
    assert_eq!(made["url"], hook.url.as_str(), "{made:#}");
    let got = one(&["push-get", &url, TOKEN, trip, "cfg-2"]);
    assert_eq!(got["url"], hook.url.as_str(), "{got:#}");
    // Over HTTP+JSON, the same config.
    let (ok, listed) = client_over("rest", &["push-list", &url, TOKEN, trip]);
    assert!(ok, "{listed:#?}");
    assert_eq!(listed[0]["configs"][0]["id"], "cfg-2", "{listed:#?}");

    // Another peer cannot see, list or delete it: to it the task does not exist.
    let other = "/a2a/other/";
    for (method, params) in [
        (
            "GetTaskPushNotificationConfig",
            json!({"taskId": trip, "id": "cfg-2"}),
        ),
        ("ListTaskPushNotificationConfigs", json!({"taskId": trip})),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": trip, "id": "cfg-2"}),
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": trip, "url": hook.url}),
        ),
    ] {
        let answer = rpc(&up, other, OTHER_TOKEN, method, params);
        assert_eq!(answer["error"]["code"], -32001, "{method}: {answer:#}");
    }
    assert_eq!(
        one(&["push-get", &url, TOKEN, trip, "cfg-2"])["id"],
        "cfg-2",
        "still there"
    );

    let done = one(&["send", &url, TOKEN, "Paris", "trip", trip]);
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done:#}");
    let hits = hook.wait_for(trip, "statusUpdate TASK_STATE_COMPLETED");
    let trip_hits: Vec<&Hit> = hits.iter().filter(|h| h.task_id() == trip).collect();
    assert!(
        trip_hits
            .iter()
            .all(|h| h.header("authorization") == Some("Bearer hook-secret-2")),
        "{trip_hits:#?}"
    );
    assert!(
        trip_hits.iter().any(|h| h.what() == "artifactUpdate"
            && h.body["artifactUpdate"]["artifact"]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .ends_with("Paris (turn 2)")),
        "{trip_hits:#?}"
    );

    // The limit: 2 configs on unfinished tasks (the two above are finished).
    let waiting = |text: &str| {
        let t = one(&[
            "send",
            &url,
            TOKEN,
            &format!("reply: {text}?\\nINPUT_REQUIRED"),
        ]);
        t["id"].as_str().unwrap().to_string()
    };
    let (a, b) = (waiting("a"), waiting("b"));
    one(&["push-create", &url, TOKEN, &a, &hook.url, "s", "one"]);
    one(&["push-create", &url, TOKEN, &b, &hook.url, "s", "two"]);
    let over = fails(&["push-create", &url, TOKEN, &a, &hook.url, "s", "three"]);
    assert!(
        over["error"].as_str().unwrap().contains("maxPushConfigs"),
        "{over:#}"
    );
    // Replacing one of its own (same id) is not one more.
    one(&["push-create", &url, TOKEN, &a, &hook.url, "s2", "one"]);
    // Deleted, it is gone, and deleting again is no error (idempotent, as the spec asks).
    assert_eq!(one(&["push-delete", &url, TOKEN, &a, "one"]), json!({}));
    assert_eq!(one(&["push-delete", &url, TOKEN, &a, "one"]), json!({}));
    let gone = fails(&["push-get", &url, TOKEN, &a, "one"]);
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .contains("no push notification config"),
        "{gone:#}"
    );
    one(&["push-create", &url, TOKEN, &a, &hook.url, "s", "three"]);
    // A task waiting for input that is canceled tells its webhooks so (no run ends).
    let canceled = one(&["cancel", &url, TOKEN, &b]);
    assert_eq!(
        canceled["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled:#}"
    );
    hook.wait_for(&b, "statusUpdate TASK_STATE_CANCELED");

    // Every attempt is in the audit and in /metrics.
    let lines = audit_push(&up);
    let of_first: Vec<&Value> = lines
        .iter()
        .filter(|e| e["summary"].as_str().unwrap().contains(id))
        .collect();
    assert_eq!(of_first.len(), whats.len(), "{lines:#?}");
    let summary = of_first[0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("push to 127.0.0.1")
            && summary.contains("peer partner")
            && summary.contains("attempt 1: HTTP 200"),
        "{summary}"
    );
    assert!(!summary.contains("hook-secret"), "{summary}");
    let operator = format!(
        "Bearer {}",
        std::fs::read_to_string(up.state.join("operator-token"))
            .unwrap()
            .trim()
    );
    let metrics = http(
        up.addr,
        "GET",
        "/metrics",
        &[("authorization", &operator)],
        b"",
    );
    let text = metrics.body.as_str().unwrap_or_default().to_string();
    let ok_line = text
        .lines()
        .find(|l| l.starts_with("deepcli_a2a_push_attempts_total{result=\"ok\"}"))
        .unwrap_or_else(|| panic!("{text}"));
    let ok: u64 = ok_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(ok >= hook.hits().len() as u64 - 1, "{ok_line}");
}

#[test]
fn without_allow_private_targets_a_loopback_or_plain_http_webhook_is_refused_with_the_key_that_allows_it()
 {
    let up = up("");
    let url = base(&up, "sdk");
    let hook = Webhook::start(Answers::Ok);
    // Plain http.
    let refused = fails(&["push-send", &url, TOKEN, "hello", &hook.url, "s", "t"]);
    let message = refused["error"].as_str().unwrap();
    assert!(
        message.contains("https") && message.contains("a2a.push.allowPrivateTargets: true"),
        "{message}"
    );
    // https, but loopback: refused by its address, whatever the scheme.
    let https = hook.url.replace("http://", "https://");
    let refused = fails(&["push-send", &url, TOKEN, "hello", &https, "s", "t"]);
    let message = refused["error"].as_str().unwrap();
    assert!(
        message.contains("loopback") && message.contains("a2a.push.allowPrivateTargets: true"),
        "{message}"
    );
    for target in [
        "https://localhost/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://169.254.169.254/latest",
        "https://10.0.0.1/hook",
    ] {
        let refused = fails(&["push-send", &url, TOKEN, "hello", target, "s", "t"]);
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("a2a.push.allowPrivateTargets"),
            "{target}: {refused:#}"
        );
    }
    // Refused before the message went anywhere: no task, no request to the webhook.
    let status = up.status().unwrap();
    assert_eq!(status["a2a"]["tasks"], 0, "{status:#}");
    // Created on a task, over HTTP+JSON: 400 INVALID_ARGUMENT.
    let task = one(&["send", &url, TOKEN, "reply: ok?\\nINPUT_REQUIRED"]);
    let auth = format!("Bearer {TOKEN}");
    let answer = http(
        up.addr,
        "POST",
        &format!(
            "/a2a-rest/agents/sdk/tasks/{}/pushNotificationConfigs",
            task["id"].as_str().unwrap()
        ),
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        json!({"url": https}).to_string().as_bytes(),
    );
    assert_eq!(answer.status, 400, "{:#}", answer.body);
    assert_eq!(answer.body["error"]["status"], "INVALID_ARGUMENT");
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("loopback"),
        "{:#}",
        answer.body
    );
    assert!(hook.hits().is_empty());
}

#[test]
fn a_redirecting_or_failing_webhook_is_retried_then_recorded_and_the_redirect_never_followed() {
    let up = up(ALLOW_PRIVATE);
    let url = base(&up, "sdk");
    let elsewhere = Webhook::start(Answers::Ok);
    let elsewhere_addr: std::net::SocketAddr = elsewhere
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/hooks/a2a")
        .parse()
        .unwrap();
    let redirecting = Webhook::start(Answers::Redirect(elsewhere_addr));
    let failing = Webhook::start(Answers::Fail);
    let attempts = 4; // the first and 3 retries
    for (hook, answered) in [(&redirecting, "HTTP 302"), (&failing, "HTTP 500")] {
        let task = one(&["push-send", &url, TOKEN, "hello", &hook.url, "s", "t"]);
        let id = task["id"].as_str().unwrap().to_string();
        common::wait_until("every attempt of the final update", || {
            hook.hits()
                .iter()
                .filter(|h| h.what() == "statusUpdate TASK_STATE_COMPLETED")
                .count()
                == attempts
        });
        // Each update was tried 4 times, in order: no update before the last one's attempts.
        let whats: Vec<String> = hook.hits().iter().map(Hit::what).collect();
        let updates = whats.len() / attempts;
        assert_eq!(whats.len(), updates * attempts, "{whats:?}");
        for chunk in whats.chunks(attempts) {
            assert!(chunk.iter().all(|w| *w == chunk[0]), "{whats:?}");
        }
        common::wait_until("the last attempt recorded", || {
            audit_push(&up)
                .iter()
                .filter(|e| {
                    let s = e["summary"].as_str().unwrap();
                    s.contains(&id) && s.contains(&format!("attempt {attempts}: {answered}"))
                })
                .count()
                == updates
        });
        let lines: Vec<Value> = audit_push(&up)
            .into_iter()
            .filter(|e| e["summary"].as_str().unwrap().contains(&id))
            .collect();
        assert_eq!(lines.len(), whats.len(), "{lines:#?}");
    }
    assert!(elsewhere.hits().is_empty(), "a redirect was followed");

    // At delivery the target is checked again: a webhook made while private targets were
    // allowed gets nothing once they are not, and each update's one attempt is recorded as
    // refused (no retry makes it public).
    let hook = Webhook::start(Answers::Ok);
    let asked = one(&["send", &url, TOKEN, "reply: where?\\nINPUT_REQUIRED"]);
    let id = asked["id"].as_str().unwrap().to_string();
    one(&["push-create", &url, TOKEN, &id, &hook.url, "s", "late"]);
    let before = up.status().unwrap()["reconciles"].as_u64().unwrap();
    up.write_by_rename("channels.yaml", &channels(""));
    up.wait_for("channels.yaml without the key applied", |s| {
        s["reconciles"].as_u64() > Some(before)
    });
    let done = one(&["send", &url, TOKEN, "here", "", &id]);
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done:#}");
    common::wait_until("the final update's refusal recorded", || {
        audit_push(&up).iter().any(|e| {
            let s = e["summary"].as_str().unwrap();
            s.contains(&id)
                && s.contains("TASK_STATE_COMPLETED")
                && s.contains("attempt 1: refused: plain http")
                && s.contains("a2a.push.allowPrivateTargets")
        })
    });
    assert!(
        !audit_push(&up).iter().any(|e| {
            let s = e["summary"].as_str().unwrap();
            s.contains(&id) && s.contains("attempt 2")
        }),
        "a refused target was retried"
    );
    assert!(hook.hits().is_empty(), "{:#?}", hook.hits());
}

#[test]
fn the_extended_card_lists_what_each_peer_may_reach_and_needs_a_token() {
    let up = up("");
    let root = format!("http://{}/", up.addr);
    let skills = |card: &Value| -> Vec<String> {
        card["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let limits = |card: &Value| -> Value {
        card["capabilities"]["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["uri"].as_str().unwrap().contains("peer-limits"))
            .unwrap_or_else(|| panic!("{card:#}"))["params"]
            .clone()
    };
    let public = one(&["card", &root, TOKEN]);
    assert_eq!(skills(&public), ["sdk", "other"]);
    assert!(
        public["capabilities"].get("extensions").is_none(),
        "{public:#}"
    );
    let partner = one(&["extended-card", &root, TOKEN]);
    assert_eq!(skills(&partner), ["sdk", "other"], "{partner:#}");
    assert_eq!(
        limits(&partner),
        json!({"peer": "partner", "agents": ["sdk", "other"], "requestsPerMinute": 600,
               "maxStreams": 16, "maxPushConfigs": 2})
    );
    let narrow = one(&["extended-card", &root, OTHER_TOKEN]);
    assert_eq!(skills(&narrow), ["other"], "{narrow:#}");
    assert_eq!(
        limits(&narrow),
        json!({"peer": "narrow", "agents": ["other"], "requestsPerMinute": 50,
               "maxStreams": 16, "maxPushConfigs": 16})
    );
    // Over HTTP+JSON, the same card.
    let (ok, rest) = client_over("rest", &["extended-card", &root, OTHER_TOKEN]);
    assert!(ok, "{rest:#?}");
    assert_eq!(skills(&rest[0]), ["other"]);
    // An agent's own endpoint: its card, with the peer's limits.
    let own = one(&["extended-card", &base(&up, "other"), OTHER_TOKEN]);
    assert_eq!(skills(&own), ["other"]);
    assert_eq!(limits(&own)["peer"], "narrow");
    // Without a token there is none.
    let anonymous = http(up.addr, "GET", "/a2a-rest/extendedAgentCard", &[], b"");
    assert_eq!(anonymous.status, 401, "{:#}", anonymous.body);
    let answer = rpc(
        &up,
        "/a2a/",
        "not-a-peer-token-at-all",
        "GetExtendedAgentCard",
        json!({}),
    );
    assert_eq!(
        answer["error"]["data"][0]["reason"], "UNAUTHENTICATED",
        "{answer:#}"
    );
}

/// ListTaskPushNotificationConfigs pages (`pageSize`, `pageToken`, in the order of the configs'
/// ids), and A2A 0.3's `tasks/pushNotificationConfig/{set,get,list,delete}` are served in 0.3's
/// shapes: the official Python SDK, its 1.0 client and its 0.3 compatibility transport
/// (issue 38).
#[test]
fn push_configs_are_listed_in_pages_and_served_under_0_3s_names_to_the_python_sdk() {
    let up = up(ALLOW_PRIVATE);
    let url = base(&up, "sdk");
    let webhook = "http://127.0.0.1:9/hook";
    let docs = crate::a2a::python_peer("a2a_push_client.py", &[&url, TOKEN, webhook]);
    let ids = |page: &Value| -> Vec<String> {
        page["configs"]
            .as_array()
            .map(|c| {
                c.iter()
                    .map(|c| c["id"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let pages = &docs[0];
    assert_eq!(ids(&pages["first"]), ["c-1", "c-2"], "{pages:#}");
    assert_eq!(pages["first"]["nextPageToken"], "c-2", "{pages:#}");
    assert_eq!(ids(&pages["second"]), ["c-3"], "{pages:#}");
    assert!(
        pages["second"]["nextPageToken"]
            .as_str()
            .is_none_or(str::is_empty),
        "{pages:#}"
    );

    let old = &docs[1];
    assert_eq!(old["created"]["id"], "v03-1", "{old:#}");
    assert_eq!(old["created"]["url"], webhook, "{old:#}");
    assert_eq!(old["got"]["id"], "v03-1", "{old:#}");
    assert_eq!(old["got"]["token"], "t-v03", "{old:#}");
    assert_eq!(old["got"]["authentication"]["scheme"], "Bearer", "{old:#}");
    assert!(
        !old.to_string().contains("hook-secret"),
        "the credentials are never shown back: {old:#}"
    );
    assert_eq!(
        ids(&old["listed"]),
        ["c-1", "c-2", "c-3", "v03-1"],
        "{old:#}"
    );
    assert_eq!(ids(&old["afterDelete"]), ["c-1", "c-2", "c-3"], "{old:#}");
}
