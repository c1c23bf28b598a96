//! `deepcli fake-platform`: the shipped fakes served by the binary, and a person chatting
//! through them from the command line (`say`, `press`) with the controller's adapter on the
//! other side. The Telegram fake's walk-through is examples/chat-demo (tests/it/examples.rs);
//! here, Slack (its Socket Mode, Block Kit buttons and threads) and Discord (its Gateway,
//! components and interactions).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use super::adapter;
use crate::common::{Up, bin, free_addr};

/// The fake, stopped when dropped.
struct Fake(Child);

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fake_platform(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("fake-platform")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_slack_chat_on_the_shipped_fake_is_answered_with_buttons_to_press() {
    let addr = free_addr().to_string();
    let mut child = Command::new(bin())
        .args(["fake-platform", "slack", "--listen", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let _fake = Fake(child);
    assert_eq!(
        banner.trim_end(),
        format!("A fake Slack serves on http://{addr}/api (the app @deepcli).")
    );
    let agents = format!(
        "agents:\n  list:\n    - id: main\n      default: true\n      runtime: {{kind: acp, command: [\"{}\", demo-agent]}}\n      permissions: {{mode: ask, route: origin, approvers: [\"slack:U0ALICE\"]}}\n",
        bin().display()
    );
    let channels = format!(
        "channels:\n  slack:\n    accounts:\n      default:\n        apiBase: http://{addr}/api\n        botToken: {{source: env, id: SLACK_BOT_TOKEN}}\n        appToken: {{source: env, id: SLACK_APP_TOKEN}}\n        dmPolicy: open\n        allowFrom: [\"*\"]\n"
    );
    let up = Up::start_config(&agents, &channels, "bindings: []\n", |c| {
        c.env("SLACK_BOT_TOKEN", "xoxb-1-test")
            .env("SLACK_APP_TOKEN", "xapp-1-test");
    });
    up.wait_for("the Slack app connected", |s| {
        adapter(s, "slack", "default")["state"] == "connected"
    });
    let to = ["--to", addr.as_str()];

    let out = fake_platform(&[&["say", "hello"][..], &to].concat());
    assert_eq!(
        text(&out.stdout),
        "bot: echo: hello\n",
        "{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));

    let out = fake_platform(&[&["say", "PERMIT execute rm -rf build"][..], &to].concat());
    let prompt = text(&out.stdout);
    assert!(prompt.starts_with("bot: Approval needed ("), "{prompt}");
    assert!(
        prompt.ends_with("  [1] Approve once [2] Always [3] Deny\n"),
        "{prompt}"
    );

    // bob is no approver: his press decides nothing, and the bot posts nothing.
    let out = fake_platform(&[&["press", "1", "--from", "bob", "--wait", "2"][..], &to].concat());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("the bot posted no buttons in dm bob"),
        "{}",
        text(&out.stderr)
    );

    let out = fake_platform(&[&["press", "4"][..], &to].concat());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("have no button 4"),
        "{}",
        text(&out.stderr)
    );

    let out = fake_platform(&[&["press", "1"][..], &to].concat());
    let answer = text(&out.stdout);
    assert!(
        answer.contains("approved by slack:U0ALICE, once."),
        "{answer}\n{}",
        text(&out.stderr)
    );
    assert!(answer.ends_with("bot: permission: allow\n"), "{answer}");

    // Nothing listens: the command says where it looked.
    let closed = free_addr().to_string();
    let out = fake_platform(&["say", "hello", "--to", &closed]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(&format!("no fake platform answers at http://{closed}")),
        "{}",
        text(&out.stderr)
    );
}

/// The shipped Discord fake: a DM answered over the Gateway, an approval's buttons pressed in
/// the DM, the prompt edited with the outcome.
#[test]
fn a_discord_chat_on_the_shipped_fake_is_answered_with_buttons_to_press() {
    let addr = free_addr().to_string();
    let mut child = Command::new(bin())
        .args(["fake-platform", "discord", "--listen", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let _fake = Fake(child);
    assert!(
        banner.starts_with(&format!(
            "A fake Discord serves on http://{addr}/api (the bot @deepcli, in guild "
        )),
        "{banner}"
    );
    // alice is the first person the fake meets.
    let alice = "400000000000000001";
    let agents = format!(
        "agents:\n  list:\n    - id: main\n      default: true\n      runtime: {{kind: acp, command: [\"{}\", demo-agent]}}\n      permissions: {{mode: ask, route: origin, approvers: [\"discord:{alice}\"]}}\n",
        bin().display()
    );
    let channels = format!(
        "channels:\n  discord:\n    accounts:\n      default:\n        apiBase: http://{addr}/api\n        token: {{source: env, id: DISCORD_BOT_TOKEN}}\n        dmPolicy: open\n        allowFrom: [\"*\"]\n"
    );
    let up = Up::start_config(&agents, &channels, "bindings: []\n", |c| {
        c.env("DISCORD_BOT_TOKEN", "fake-discord-token-1");
    });
    up.wait_for("the Discord bot connected", |s| {
        adapter(s, "discord", "default")["state"] == "connected"
    });
    let to = ["--to", addr.as_str()];
    let out = fake_platform(&[&["say", "hello"][..], &to].concat());
    assert_eq!(
        text(&out.stdout),
        "bot: echo: hello\n",
        "{}",
        text(&out.stderr)
    );
    let out = fake_platform(&[&["say", "PERMIT execute rm -rf build"][..], &to].concat());
    let prompt = text(&out.stdout);
    assert!(prompt.starts_with("bot: Approval needed ("), "{prompt}");
    assert!(
        prompt.ends_with("  [1] Approve once [2] Always [3] Deny\n"),
        "{prompt}"
    );
    let out = fake_platform(&[&["press", "1"][..], &to].concat());
    let answer = text(&out.stdout);
    assert!(
        answer.contains(&format!("approved by discord:{alice}, once.")),
        "{answer}\n{}",
        text(&out.stderr)
    );
    assert!(answer.ends_with("bot: permission: allow\n"), "{answer}");
}
