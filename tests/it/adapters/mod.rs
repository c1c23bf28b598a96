//! The platform adapters end to end (adapters.md): `deepcli up` connecting by itself to local
//! fakes of the Telegram Bot API, the Slack Web API / Socket Mode / Events API and Discord's
//! REST API and Gateway that record every call, delivering to the echo agent on the ACP TypeScript SDK, and posting its
//! replies back. No test reaches a real platform.

mod discord;
mod discord_fake;
mod fake_cli;
mod slack;
mod slack_fake;
mod telegram;
pub mod telegram_fake;

use std::process::Command;

use serde_json::Value;

use crate::common::{Up, bin};

/// Shortened timings: Telegram long polls of 1 s, reconnects after 100 ms.
pub const FAST: &str = "telegram_poll_s=1,adapter_backoff_ms=100";

/// `deepcli <args>` on the controller's directories.
pub fn deepcli(up: &Up, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args([
            "--config",
            up.config.to_str().unwrap(),
            "--state-dir",
            up.state.to_str().unwrap(),
        ])
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .output()
        .unwrap()
}

/// The live adapter of `channel/account` in a status document.
pub fn adapter<'a>(doc: &'a Value, channel: &str, account: &str) -> &'a Value {
    &doc["channels"][channel]["accounts"][account]["adapter"]
}

/// The lines of `channels logs` for `channel`.
/// What a chat says to the echo agent to spawn a subagent that answers at once.
pub const SPAWN: &str = r#"mcp sessions_spawn {"task": "reply: the child is done", "label": "w1"}"#;

/// Whether a posted text is the parent's answer to [`SPAWN`]'s announce.
pub fn is_announce(text: &str) -> bool {
    text.contains("Subagent run") && text.contains("the child is done")
}

pub fn channel_log(up: &Up, channel: &str) -> String {
    let out = deepcli(
        up,
        &["channels", "logs", "--channel", channel, "--lines", "500"],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Adapter keys nothing reads are `not-enforced` warnings, each at its key: a channel without
/// a built-in adapter, `mode: bridge`, another platform's keys, another platform's mode.
#[test]
fn adapter_keys_nothing_reads_are_reported_not_enforced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("channels.yaml"),
        "channels:\n  matrix:\n    accounts:\n      default: {token: \"${D}\", mode: socket, apiBase: \"http://127.0.0.1:1\"}\n  telegram:\n    accounts:\n      default: {botToken: \"${T}\", mode: socket, replyToMode: all, webhookUrl: \"https://x.example/hook\", applicationId: \"1\"}\n      old: {botToken: \"${T2}\", mode: bridge, apiBase: \"http://127.0.0.1:1\"}\n    groups:\n      \"-100\": {discussion: {maxRounds: 3}}\n  slack:\n    guilds: {\"1\": {}}\n    accounts:\n      default: {botToken: \"${S}\", appToken: \"${A}\", webhookUrl: \"https://x.example/hook\", discussion: {maxRounds: 3}}\n  discord:\n    guilds: {\"1\": {}}\n    accounts:\n      default: {token: \"${DC}\", mode: socket, replyToMode: all, discussion: {maxRounds: 3}, applicationId: \"2\"}\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["validate", "--config", dir.path().to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "channels.yaml:4:32: warning[not-enforced]: `mode` of account `matrix/default` is not enforced: deepcli has no built-in adapter for channel `matrix`",
        "`apiBase` of account `matrix/default` is not enforced",
        "`mode` of account `discord/default` is not enforced: `socket` is not a discord mode (it takes `gateway`)",
        "`replyToMode` of account `discord/default` is not enforced: `replyToMode` is read by the Slack adapter only",
        "`applicationId` of account `telegram/default` is not enforced: `applicationId` is read by the Discord adapter only",
        "`guilds` of channel `slack` is not enforced",
        "`mode` of account `telegram/default` is not enforced: `socket` is not a telegram mode (it takes `polling` or `webhook`)",
        "`replyToMode` of account `telegram/default` is not enforced: `replyToMode` is read by the Slack adapter only",
        "`webhookUrl` of account `telegram/default` is not enforced: `webhookUrl` is read in `mode: webhook` only",
        "`apiBase` of account `telegram/old` is not enforced: `mode: bridge` runs no built-in adapter",
        "`discussion` of group `-100` on channel `telegram` is not enforced",
        "`webhookUrl` of account `slack/default` is not enforced",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    for read in [
        "`discussion` of account `slack/default`",
        "`discussion` of account `discord/default`",
        "`applicationId` of account `discord/default`",
        "`guilds` of channel `discord`",
    ] {
        assert!(!text.contains(read), "{read}: {text}");
    }
    assert!(!text.contains("`mode` of account `telegram/old`"), "{text}");
}
