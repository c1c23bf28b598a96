//! The ACP agents the seeds name start under deepcli and take the Hub's MCP server at
//! `session/new`: codex-acp, OpenCode (the seed's Bot B), the Claude ACP adapter and Gemini CLI,
//! pinned npm peers
//! (tests/peers/package.json). No model is called: a chat message opens the runtime session,
//! whose `session/new` carries the Hub's server; the runtime lists the Hub's tools (the
//! `deepcli_hub_tool_lists_total` metric counts it); the prompt itself then fails or times
//! out, having no real key or no network to reach a model.

use serde_json::{Value, json};

use crate::common::{Up, npm_peer, open};
use crate::hub::{SECRET, http, operator};

/// Runs agent `alpha` with `command` and `env` (YAML flow mapping entries), says hello to it in
/// Slack, and returns what it advertised at `initialize` once its session opened and it listed
/// the Hub's tools.
fn takes_the_hub(command: &[String], env: &str) -> Value {
    let command = serde_json::to_string(command).unwrap();
    let agents = format!(
        "agents:\n  list:\n    - id: alpha\n      runtime:\n        kind: acp\n        command: {command}\n        env: {{{env}}}\n"
    );
    let channels = open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: alpha, match: {channel: slack}}\n";
    let up = Up::start_config(&agents, &channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET)
            .env("DEEPCLI_TEST_DUMMY_KEY", "not-a-real-key")
            .args(["--prompt-timeout-ms", "5000"]);
    });
    let status = up.wait_for("alpha ready", |s| {
        Up::runtime(s, "alpha").is_some_and(|r| r["status"] == "ready")
    });
    let info = Up::runtime(&status, "alpha").unwrap()["info"].clone();
    let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
        "messageId": "hello-1", "sender": {"id": "u1"}, "text": "hello"});
    let (_, answer) = crate::common::signed_inbound(up.addr, SECRET.as_bytes(), &envelope);
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(!error.contains("to open a session"), "{answer}");
    let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
    let opened: i64 = db
        .query_row(
            "SELECT count(*) FROM sessions WHERE session_key = 'agent:alpha:slack:group:ga' AND runtime_session_id IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(opened, 1, "the session did not open: {answer}");
    let metrics = {
        let auth = operator(&up);
        let (_, text) = http(up.addr, "GET", "/metrics", &[("authorization", &auth)], "");
        text.as_str().unwrap_or_default().to_string()
    };
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("deepcli_hub_tool_lists_total{agent_id=\"alpha\"} ")),
        "the runtime never listed the Hub's tools:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("hub"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    info
}

fn bin(package: &str, path: &str) -> String {
    npm_peer(package).join(path).display().to_string()
}

#[test]
fn codex_acp_takes_the_hub_at_session_new() {
    let codex = crate::common::codex_acp().display().to_string();
    let info = takes_the_hub(
        &[codex],
        "OPENAI_API_KEY: {source: env, id: DEEPCLI_TEST_DUMMY_KEY}",
    );
    assert_eq!(info["agentInfo"]["name"], "codex-acp", "{info:#}");
    assert_eq!(info["agentCapabilities"]["loadSession"], true, "{info:#}");
    assert_eq!(
        info["agentCapabilities"]["mcpCapabilities"]["http"], true,
        "{info:#}"
    );
}

#[test]
fn opencode_takes_the_hub_at_session_new() {
    // The platform binary of `opencode-ai` (its launcher only picks it), for linux-x64.
    let opencode = bin("opencode-linux-x64", "bin/opencode");
    let info = takes_the_hub(
        &[opencode, "acp".into()],
        "OPENCODE_DISABLE_MODELS_FETCH: \"1\", OPENCODE_DISABLE_AUTOUPDATE: \"1\"",
    );
    assert_eq!(info["agentInfo"]["name"], "OpenCode", "{info:#}");
    let caps = &info["agentCapabilities"];
    assert_eq!(caps["loadSession"], true, "{info:#}");
    assert_eq!(caps["mcpCapabilities"]["http"], true, "{info:#}");
}

#[test]
fn the_claude_acp_adapter_takes_the_hub_at_session_new() {
    let claude = bin("@zed-industries/claude-agent-acp", "dist/index.js");
    let info = takes_the_hub(
        &["node".into(), claude],
        "ANTHROPIC_API_KEY: {source: env, id: DEEPCLI_TEST_DUMMY_KEY}",
    );
    assert_eq!(
        info["agentInfo"]["name"], "@zed-industries/claude-agent-acp",
        "{info:#}"
    );
    assert_eq!(info["agentCapabilities"]["loadSession"], true, "{info:#}");
    assert_eq!(
        info["agentCapabilities"]["mcpCapabilities"]["http"], true,
        "{info:#}"
    );
}

#[test]
fn gemini_cli_takes_the_hub_at_session_new() {
    let gemini = bin("@google/gemini-cli", "bundle/gemini.js");
    // Gemini CLI ignores a workspace's MCP servers until the folder is trusted.
    let info = takes_the_hub(
        &["node".into(), gemini, "--acp".into()],
        "GEMINI_API_KEY: {source: env, id: DEEPCLI_TEST_DUMMY_KEY}, GEMINI_CLI_TRUST_WORKSPACE: \"true\"",
    );
    assert_eq!(info["agentInfo"]["name"], "gemini-cli", "{info:#}");
    assert_eq!(info["agentCapabilities"]["loadSession"], true, "{info:#}");
    assert_eq!(
        info["agentCapabilities"]["mcpCapabilities"]["http"], true,
        "{info:#}"
    );
}
