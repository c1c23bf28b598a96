//! A2A's gRPC binding (docs/a2a.md, "The gRPC binding"), driven by the official A2A Python SDK
//! (`a2a-sdk` with grpcio, tests/peers/a2a_grpc_client.py) against `deepcli up` with the ACP
//! SDK echo agent behind it: the card's GRPC interface, send, stream, get, list, subscribe,
//! push configs, cancel, the extended card, an error's `ErrorInfo`, and no token refused.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{self, Up};

const TOKEN: &str = "partner-token-0123456789";

fn agents() -> String {
    format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      identity: {{name: Echo, description: Echoes what it is told.}}\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n    - id: other\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n",
        common::sdk_echo_agent().display()
    )
}

const CHANNELS: &str = "a2a:\n  expose: [sdk, other]\n  push:\n    allowPrivateTargets: true\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n";

/// At the hub's endpoint (a request with no tenant) the peer is routed to `other`.
const BINDINGS: &str =
    "bindings:\n  - agentId: other\n    match: {channel: a2a, peer: {kind: direct, id: partner}}\n";

/// The client's documents by step (it must succeed).
fn grpc_client(up: &Up) -> HashMap<String, Value> {
    let url = format!("http://{}/a2a/sdk/", up.addr);
    // Nothing listens there: the config is created, listed and deleted, never delivered to.
    let webhook = "http://127.0.0.1:9/hook";
    crate::a2a::python_peer("a2a_grpc_client.py", &[url.as_str(), TOKEN, webhook])
        .into_iter()
        .map(|d| (d["step"].as_str().unwrap_or_default().to_string(), d))
        .collect()
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

#[test]
fn the_python_sdk_speaks_every_method_over_grpc() {
    let up = Up::start_config(&agents(), CHANNELS, BINDINGS, |c| {
        c.env("PARTNER_TOKEN", TOKEN);
    });
    up.wait_for("the echo agents ready", |doc| {
        ["sdk", "other"]
            .iter()
            .all(|id| Up::runtime(doc, id).is_some_and(|r| r["status"] == "ready"))
    });
    let steps = grpc_client(&up);

    // The card's gRPC interface: the listener, the agent as its tenant; the SDK took it.
    let t = &steps["transport"];
    assert_eq!(t["transport"], "TenantTransportDecorator", "{t:#}");
    let interface = &t["interfaces"][0];
    assert_eq!(interface["url"], format!("http://{}", up.addr), "{t:#}");
    assert_eq!(interface["tenant"], "sdk", "{t:#}");
    assert_eq!(interface["protocolVersion"], "1.0", "{t:#}");

    // A blocking send: the completed task with the echo as its artifact.
    let sent = &steps["send"]["events"][0]["task"];
    assert_eq!(state(sent), "TASK_STATE_COMPLETED", "{sent:#}");
    let said = sent["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("hello over grpc"), "{sent:#}");

    // A stream: the task, then its updates, ending completed with the artifact.
    let events = steps["stream"]["events"].as_array().unwrap();
    assert!(events[0].get("task").is_some(), "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("streamed over grpc"))),
        "{events:#?}"
    );
    assert_eq!(
        state(&events.last().unwrap()["statusUpdate"]),
        "TASK_STATE_COMPLETED",
        "{events:#?}"
    );

    // Get (historyLength honoured) and list (both tasks so far).
    let got = &steps["get"]["task"];
    assert_eq!(got["id"], sent["id"], "{got:#}");
    assert_eq!(got["history"].as_array().map(Vec::len), Some(1), "{got:#}");
    let listed = steps["list"]["page"]["tasks"].as_array().unwrap();
    assert!(listed.iter().any(|t| t["id"] == sent["id"]), "{listed:#?}");
    assert!(listed.len() >= 2, "{listed:#?}");

    // Push configs on the working task: created, listed, deleted.
    let push = &steps["push"];
    let created = &push["created"];
    assert_eq!(created["url"], "http://127.0.0.1:9/hook", "{push:#}");
    assert!(
        created["id"].as_str().is_some_and(|i| !i.is_empty()),
        "{push:#}"
    );
    assert_eq!(
        push["listed"]["configs"][0]["id"], created["id"],
        "{push:#}"
    );
    assert!(push["afterDelete"].get("configs").is_none(), "{push:#}");

    // Cancel of a working task: the send's stream and the subscription both end in the
    // task's final state, never the echo's COMPLETED (the `slow` turn runs a minute unless
    // canceled). That the runtime confirms it (CANCELED) is a2a.rs's test: a cancel that
    // reaches the agent before its turn has begun waiting for one is not confirmed, and the
    // task is then honestly FAILED with the outcome unknown.
    let cancel = &steps["cancel"];
    let ended = state(&cancel["task"]);
    assert!(
        ended == "TASK_STATE_CANCELED"
            || (ended == "TASK_STATE_FAILED"
                && cancel["task"]["status"].to_string().contains("uncertain")),
        "{cancel:#}"
    );
    let stream_end = &cancel["stream"].as_array().unwrap().last().unwrap()["statusUpdate"];
    assert_eq!(state(stream_end), ended, "{cancel:#}");
    let sub = cancel["subscribe"].as_array().unwrap();
    assert_eq!(sub[0]["task"]["id"], cancel["task"]["id"], "{cancel:#}");
    assert_eq!(
        state(&sub.last().unwrap()["statusUpdate"]),
        ended,
        "{cancel:#}"
    );

    // The extended card: the peer's limits as an extension.
    let card = &steps["extendedCard"]["card"];
    assert_eq!(card["name"], "Echo", "{card:#}");
    assert!(
        card["capabilities"]["extensions"]
            .as_array()
            .is_some_and(|e| !e.is_empty()),
        "{card:#}"
    );

    // An unknown task: NOT_FOUND with A2A's ErrorInfo, which the SDK turns into its class.
    assert_eq!(
        steps["notFound"]["sdkError"], "TaskNotFoundError",
        "{steps:#?}"
    );
    let status = &steps["notFoundStatus"];
    assert_eq!(status["code"], "NOT_FOUND", "{status:#}");
    assert_eq!(
        status["errorInfo"]["reason"], "TASK_NOT_FOUND",
        "{status:#}"
    );
    assert_eq!(
        status["errorInfo"]["domain"], "a2a-protocol.org",
        "{status:#}"
    );

    // No tenant: the hub's endpoint, routed by bindings.yaml to `other` (in its workspace).
    let routed = &steps["routed"]["task"];
    assert_eq!(state(routed), "TASK_STATE_COMPLETED", "{routed:#}");
    let cwd = routed["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        cwd.starts_with("cwd: ") && cwd.contains("other"),
        "{routed:#}"
    );

    // No token: UNAUTHENTICATED, with the door's reason.
    let bare = &steps["noToken"];
    assert_eq!(bare["code"], "UNAUTHENTICATED", "{bare:#}");
    assert_eq!(bare["errorInfo"]["reason"], "UNAUTHENTICATED", "{bare:#}");
}
