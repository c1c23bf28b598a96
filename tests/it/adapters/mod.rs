//! The platform adapters end to end (adapters.md): `deepcli up` connecting by itself to local
//! fakes of the Telegram Bot API and the Slack Web API / Socket Mode / Events API that record
//! every call, delivering to the echo agent on the ACP TypeScript SDK, and posting its
//! replies back. No test reaches a real platform.

mod slack;
mod slack_fake;
mod telegram;
mod telegram_fake;

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
pub fn channel_log(up: &Up, channel: &str) -> String {
    let out = deepcli(
        up,
        &["channels", "logs", "--channel", channel, "--lines", "500"],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
