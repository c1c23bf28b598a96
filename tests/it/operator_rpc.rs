//! The operator's `POST /rpc` as one door: a batch may mix the Hub's, the approvals' and the
//! management service's methods, and each call is answered by its own service; a notification
//! is answered by none.

use serde_json::json;

use crate::hub::{agents, http, hub_up, operator, say};

/// A batch reached only the management service once: its `sessions/*` and `approvals/*`
/// calls were answered "method not found".
#[test]
fn a_batch_mixing_areas_is_answered_by_each_areas_service() {
    let up = hub_up(&agents("", "", ""), |_| {});
    assert!(say(&up, "gb", "hello").starts_with("echo: "));
    let auth = operator(&up);
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "_mustang.agent/sessions/list", "params": {"agentId": "beta"}},
        {"jsonrpc": "2.0", "id": 2, "method": "_mustang.agent/approvals/list", "params": {"all": true}},
        {"jsonrpc": "2.0", "method": "_mustang.agent/runs/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "_mustang.agent/agents/list"},
        {"jsonrpc": "2.0", "id": 4, "method": "_mustang.agent/runs/fly"},
        {"jsonrpc": "2.0", "id": 5, "method": "_mustang.agent/sessions/show", "params": {"sessionKey": "agent:beta:slack:group:nope"}}
    ]);
    let (status, answers) = http(
        up.addr,
        "POST",
        "/rpc",
        &[("authorization", &auth)],
        &batch.to_string(),
    );
    assert_eq!(status, 200, "{answers}");
    let answers = answers.as_array().unwrap_or_else(|| panic!("{answers}"));
    // The notification is not answered; the rest are, in order.
    let ids: Vec<_> = answers.iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids, [json!(1), json!(2), json!(3), json!(4), json!(5)]);
    let sessions = answers[0]["result"]["sessions"].as_array();
    assert!(
        sessions.is_some_and(|s| s
            .iter()
            .any(|s| s["sessionKey"] == "agent:beta:slack:group:gb")),
        "{:#}",
        answers[0]
    );
    assert!(
        answers[1]["result"]["approvals"].is_array(),
        "{:#}",
        answers[1]
    );
    assert!(
        answers[2]["result"]["agents"].is_array(),
        "{:#}",
        answers[2]
    );
    assert_eq!(answers[3]["error"]["code"], -32601, "{:#}", answers[3]);
    assert_eq!(answers[4]["error"]["code"], -32004, "{:#}", answers[4]);

    // A Hub notification alone: nothing to answer.
    let (status, _) = http(
        up.addr,
        "POST",
        "/rpc",
        &[("authorization", &auth)],
        &json!({"jsonrpc": "2.0", "method": "_mustang.agent/sessions/list"}).to_string(),
    );
    assert_eq!(status, 204);
}
