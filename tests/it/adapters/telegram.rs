//! Telegram through the fake Bot API: polling from the first `deleteWebhook` to the reply,
//! DM pairing, group mention gating, redelivery, rate limits and dead letters, a controller
//! killed mid-reply, webhook mode and a refused token.

use serde_json::{Value, json};

use super::telegram_fake::{BOT_ID, BOT_NAME, Fake, Server, TOKEN, Waits};
use super::{FAST, SPAWN, adapter, channel_log, deepcli, is_announce};
use crate::common::{Up, count, sdk_agents};

const ALL_TO_SDK: &str = "bindings:\n  - agentId: sdk\n    match: {channel: telegram}\n";

/// channels.yaml with one Telegram account on the fake; `extra` adds keys to the account,
/// `channel` to the channel.
fn channels(server: &Server, extra: &str, channel: &str) -> String {
    format!(
        "channels:\n  telegram:\n{channel}    accounts:\n      default:\n        botToken: {{source: env, id: TG_TOKEN}}\n        apiBase: \"{}\"\n{extra}",
        server.base()
    )
}

fn start(_server: &Server, channels: &str) -> Up {
    Up::start_config(&sdk_agents(), channels, ALL_TO_SDK, |cmd| {
        cmd.env("TG_TOKEN", TOKEN)
            .env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    })
}

/// DMs open to anyone on the account.
const OPEN_DMS: &str = "        dmPolicy: open\n        allowFrom: [\"*\"]\n";

/// [`start`] with DMs open to anyone, once the adapter is connected.
fn start_open(server: &Server) -> Up {
    let up = start(server, &channels(server, OPEN_DMS, ""));
    connected(&up);
    up
}

/// The controller started again on the same config and state (after a kill), connected.
fn restart(up: &mut Up) {
    up.restart(|cmd| {
        cmd.env("TG_TOKEN", TOKEN)
            .env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    });
    connected(up);
}

fn connected(up: &Up) -> Value {
    up.wait_for("the Telegram adapter connected", |s| {
        adapter(s, "telegram", "default")["state"] == "connected"
    })
}

fn private(id: i64) -> Value {
    json!({"id": id, "type": "private", "first_name": "Ada"})
}

fn user(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": "Ada"})
}

fn texts(sent: &[Value]) -> Vec<String> {
    sent.iter()
        .map(|s| s["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A DM from a stranger gets a pairing code by sendMessage; once the operator approves it,
/// the next DM reaches the agent and its reply comes back in the chat, as a reply to it.
#[test]
fn a_telegram_dm_pairs_then_reaches_the_agent() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start(&server, &channels(&server, "", ""));
    let status = connected(&up);
    let live = adapter(&status, "telegram", "default");
    assert_eq!(
        live["identity"]["botUserId"],
        BOT_ID.to_string(),
        "{live:#}"
    );
    assert_eq!(live["identity"]["name"], BOT_NAME);
    assert_eq!(live["mode"], "polling");
    // deleteWebhook first, then getMe, then polling (the status may say `connected` a moment
    // before the first poll leaves).
    fake.wait("the first poll", |f| !f.calls_of("getUpdates").is_empty());
    let methods: Vec<String> = fake.calls().iter().map(|c| c.method.clone()).collect();
    assert_eq!(&methods[..2], ["deleteWebhook", "getMe"], "{methods:?}");
    assert_eq!(methods[2], "getUpdates");

    fake.message(private(42), user(42), "hello", json!({}));
    let sent = fake.wait_sent(1);
    let pairing = sent[0]["text"].as_str().unwrap();
    assert!(pairing.contains("pairing code"), "{pairing}");
    assert_eq!(sent[0]["chat_id"], 42);
    let code = pairing
        .split("code is ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_string();
    let out = deepcli(&up, &["pairing", "approve", "telegram", &code]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let second = fake.message(private(42), user(42), "hello again", json!({}));
    let sent = fake.wait_sent(2);
    assert!(
        sent[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("echo: hello again"),
        "{sent:#?}"
    );
    assert_eq!(
        sent[1]["reply_parameters"]["message_id"],
        second["message"]["message_id"]
    );
    let human = deepcli(&up, &["status"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains(&format!("adapter      telegram/default         connected   polling  bot {BOT_ID} ({BOT_NAME})  last event ")),
        "{human}"
    );
    let status = up.status().unwrap();
    let live = adapter(&status, "telegram", "default");
    assert_eq!(live["events"], 2, "{live:#}");
    assert_eq!(live["posted"], 2, "{live:#}");
    assert!(live["lastEventAt"].is_string());
}

/// In a group only a message that mentions the bot (by its @username, or a reply to it)
/// reaches the agent; the others are kept as context, never answered.
#[test]
fn a_telegram_group_message_needs_a_mention() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start(&server, &channels(&server, "", "    groupPolicy: open\n"));
    connected(&up);
    let group = json!({"id": -100_500, "type": "supergroup", "title": "Team"});
    fake.message(group.clone(), user(7), "talking among ourselves", json!({}));
    let mention = format!("@{BOT_NAME} what do you think?");
    fake.message(
        group.clone(),
        user(7),
        &mention,
        json!({"entities": [{"type": "mention", "offset": 0, "length": BOT_NAME.len() + 1}]}),
    );
    let sent = fake.wait_sent(1);
    let text = sent[0]["text"].as_str().unwrap();
    // The kept message is context for the answered one.
    assert!(text.contains("talking among ourselves"), "{text}");
    assert!(text.contains(&mention), "{text}");
    // A reply to one of the bot's messages counts as a mention too.
    fake.message(
        group.clone(),
        user(7),
        "and this?",
        json!({"reply_to_message": {"message_id": 1, "from": {"id": BOT_ID, "is_bot": true}}}),
    );
    let sent = fake.wait_sent(2);
    assert!(sent[1]["text"].as_str().unwrap().contains("and this?"));
    assert!(channel_log(&up, "telegram").contains("gated=not-mentioned"));
    assert_eq!(fake.sent().len(), 2);
}

/// The same message delivered again in a new update reaches the agent once and is answered
/// once. (An update Telegram redelivers with its update_id is one the offset has not confirmed:
/// the inbox takes it once; the webhook test sends one twice.)
#[test]
fn a_redelivered_telegram_update_is_answered_once() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start_open(&server);
    let first = fake.message(private(5), user(5), "once", json!({}));
    fake.wait_sent(1);
    let mut again = first.clone();
    again.as_object_mut().unwrap().remove("update_id");
    fake.push(again);
    // A later message in the same chat is handled after them, in order.
    fake.message(private(5), user(5), "twice", json!({}));
    let sent = fake.wait_sent(2);
    assert_eq!(
        texts(&sent)
            .iter()
            .map(|t| t.split(" (turn").next().unwrap().to_string())
            .collect::<Vec<_>>(),
        ["echo: once", "echo: twice"]
    );
    let status = up.status().unwrap();
    assert_eq!(adapter(&status, "telegram", "default")["events"], 3);
    assert!(channel_log(&up, "telegram").contains(" duplicate"));
    assert_eq!(fake.sent().len(), 2);
}

/// A 429 on sendMessage is waited out (retry_after) and the reply sent; a chat that cannot be
/// written to makes a dead letter with the reason, shown by `channels logs`; a long reply is
/// cut into 4,096-unit pieces; NO_REPLY is not posted.
#[test]
fn telegram_replies_honour_rate_limits_split_and_dead_letter() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start_open(&server);
    fake.rate_limit_next_sends(1);
    fake.message(private(8), user(8), "limited", json!({}));
    let sent = fake.wait_sent(1);
    assert!(
        sent[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("echo: limited")
    );
    assert_eq!(
        fake.calls_of("sendMessage").len(),
        2,
        "one 429, then the reply"
    );
    assert!(
        channel_log(&up, "telegram").contains("rate-limited method=sendMessage retry_after_s=1")
    );

    fake.message(private(8), user(8), "reply: NO_REPLY", json!({}));
    // One line (the echo agent scripts a one-line reply), cut at the space.
    let long = format!("{} {}", "a".repeat(3000), "b".repeat(3000));
    fake.message(private(8), user(8), &format!("reply: {long}"), json!({}));
    let sent = fake.wait_sent(3);
    assert_eq!(
        texts(&sent[1..]),
        ["a".repeat(3000), "b".repeat(3000)],
        "NO_REPLY is not posted; the long one in two"
    );

    fake.unwritable(9);
    fake.message(private(9), user(9), "nobody hears", json!({}));
    up.wait_for("the dead letter", |s| {
        adapter(s, "telegram", "default")["deadLetters"] == 1
    });
    let log = channel_log(&up, "telegram");
    assert!(log.contains("dead-letter"), "{log}");
    assert!(log.contains("chat not found"), "{log}");
    assert!(log.contains("target=telegram:sendMessage"), "{log}");
    let metrics = metrics(&up);
    assert!(
        metrics.contains(
            "deepcli_adapter_dead_letters_total{channel=\"telegram\",account=\"default\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "deepcli_adapter_connected{channel=\"telegram\",account=\"default\",state=\"connected\"} 1"
    ));
}

fn metrics(up: &Up) -> String {
    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    agent
        .get(format!("http://{}/metrics", up.addr))
        .header("authorization", &format!("Bearer {}", token.trim()))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// A controller killed while a reply was on its way: the next one neither loses the reply
/// nor answers twice, and polls on from the recorded offset.
#[test]
fn a_controller_killed_mid_reply_neither_loses_nor_repeats() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let mut up = start_open(&server);
    fake.message(private(3), user(3), "first", json!({}));
    fake.wait_sent(1);
    fake.hold_sends(true);
    let second = fake.message(private(3), user(3), "second", json!({}));
    fake.wait("the reply to `second` on its way", |f| {
        f.calls_of("sendMessage").len() == 2
    });
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    // The held call's caller is gone, so Telegram never took it. (Released with
    // `hold_sends(false)`, the fake took it whenever its server had not yet seen the
    // connection close, and the next controller's post was a second one: no sender can tell a
    // platform that took a reply it never heard back about from one that did not.)
    fake.abandon_held();
    let polls_before = fake.calls_of("getUpdates").len();
    up.restart(|cmd| {
        cmd.env("TG_TOKEN", TOKEN)
            .env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    });
    fake.message(private(3), user(3), "third", json!({}));
    let sent = fake.wait_sent(3);
    let said: Vec<String> = texts(&sent)
        .iter()
        .map(|t| t.split(" (turn").next().unwrap().to_string())
        .collect();
    assert_eq!(said, ["echo: first", "echo: second", "echo: third"]);
    // The first poll after the restart starts past `second`: recorded, not asked again.
    let after = &fake.calls_of("getUpdates")[polls_before];
    assert_eq!(
        after.body["offset"],
        second["update_id"].as_i64().unwrap() + 1,
        "{:#?}",
        after.body
    );
    up.wait_for("nothing more to send", |_| fake.sent().len() == 3);
}

/// A controller killed while the agent was in the middle of a message's turn (issue C1): the
/// adapter's inbox hands the update in again after the restart, and the agent is not prompted
/// a second time — it may have acted on the first. The message is recorded as an `uncertain`
/// delivery with a transcript note, and its turn counts against the agent's budgets.
#[test]
fn a_turn_begun_before_a_crash_is_not_prompted_again() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let mut up = start_open(&server);
    // Inside the agent's workspace: its sandbox sees nothing else of the test's directory.
    let release = up.state.join("workspaces/sdk/release");
    fake.message(
        private(4),
        user(4),
        &format!("hold {}", release.display()),
        json!({}),
    );
    let begun = "SELECT count(*) FROM turns_started";
    up.wait_for("the turn begun", |_| count(&up.state, begun) == 1);
    // The agent has it: its first turn is on its own record (it keeps its sessions' turn
    // counts in its workspace).
    let record = up.state.join("workspaces/sdk/.sdk-echo-sessions.json");
    up.wait_for("the agent in its turn", |_| {
        std::fs::read_to_string(&record)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .is_some_and(|v| v.as_object().is_some_and(|o| o.values().any(|n| n == 1)))
    });
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    // A prompt of it again would now be answered at once.
    std::fs::write(&release, "").unwrap();
    restart(&mut up);
    fake.message(private(4), user(4), "after", json!({}));
    let sent = fake.wait_sent(1);
    assert_eq!(
        texts(&sent),
        ["echo: after (turn 2)"],
        "the held message was not prompted again, nor answered"
    );
    assert_eq!(count(&up.state, begun), 0);
    assert_eq!(
        count(
            &up.state,
            "SELECT count(*) FROM deliveries WHERE json_extract(response, '$.state') = 'uncertain'"
        ),
        1
    );
    assert_eq!(
        count(
            &up.state,
            "SELECT count(*) FROM budget_events WHERE agent_id = 'sdk' AND kind = 'turn'"
        ),
        2,
        "the killed turn and the next one"
    );
    let key = "agent:sdk:main";
    let said = crate::common::transcript(&up.state, key);
    assert!(
        said.iter()
            .any(|(p, t)| p == "acp" && t.contains("controller stopped during this turn")),
        "{said:?}"
    );
    up.wait_for("nothing more to send", |_| fake.sent().len() == 1);
}

/// A 2 MiB reply (issue E4: stored twice whole, posted as 513 Telegram messages) is kept to
/// `budgets.replyBytes` (1 MiB by default) with a note, and posted as at most
/// `maxReplyMessages` (10 by default) messages, the last saying the rest was cut.
#[test]
fn a_flood_reply_is_cut_to_its_caps() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start_open(&server);
    fake.message(private(5), user(5), "flood 2048", json!({}));
    let sent = fake.wait_sent(10);
    up.wait_for("the turn recorded", |_| {
        count(
            &up.state,
            "SELECT count(*) FROM transcript WHERE provenance = 'agent'",
        ) == 1
    });
    let texts = texts(&sent);
    assert_eq!(texts.len(), 10);
    assert!(texts[9].contains("maxReplyMessages"), "{}", texts[9]);
    let kept = count(
        &up.state,
        "SELECT max(length(CAST(text AS BLOB))) FROM transcript WHERE provenance = 'agent'",
    );
    assert!(
        (1024 * 1024..1024 * 1024 + 200).contains(&kept),
        "the reply kept is 1 MiB and a note: {kept}"
    );
    let said = crate::common::transcript(&up.state, "agent:sdk:main");
    assert!(
        said.iter()
            .any(|(_, t)| t.ends_with("of its 2097152 bytes (budgets.replyBytes)]")),
        "the note says how long it was"
    );
    // Nothing more is posted.
    fake.message(private(5), user(5), "after", json!({}));
    let sent = fake.wait_sent(11);
    assert!(texts_of(&sent[10]).starts_with("echo: after"));
}

fn texts_of(sent: &Value) -> String {
    sent["text"].as_str().unwrap_or_default().to_string()
}

/// A controller killed while the second piece of a long reply was on its way (issue C2): the
/// inbox keeps how many pieces the platform took, so after the restart only the rest is
/// posted — the first piece is not repeated. (The piece in flight may be: Telegram has no
/// idempotency key; channels.md says so.)
#[test]
fn a_reply_cut_short_by_a_crash_posts_only_the_rest() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let mut up = start_open(&server);
    // How many pieces the reply is, posted whole in another chat.
    fake.message(private(7), user(7), "flood 12", json!({}));
    up.wait_for("the whole reply posted", |_| {
        count(&up.state, "SELECT count(*) FROM adapter_inbox") == 0 && !fake.sent().is_empty()
    });
    let pieces = fake.sent().len();
    assert!(pieces >= 3, "a reply of several pieces: {pieces}");

    fake.hold_sends_after(1);
    fake.message(private(6), user(6), "flood 12", json!({}));
    fake.wait("the second piece on its way", |f| {
        f.calls_of("sendMessage").len() == pieces + 2
    });
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    fake.abandon_held();
    restart(&mut up);
    up.wait_for("the rest posted", |_| {
        count(&up.state, "SELECT count(*) FROM adapter_inbox") == 0
    });
    let to_six = fake.sent().iter().filter(|m| m["chat_id"] == 6).count();
    assert_eq!(to_six, pieces, "every piece once: none posted twice");
}

/// Webhook mode: setWebhook with the secret token, updates POSTed to the controller; a wrong
/// or missing secret token is refused.
#[test]
fn telegram_webhook_mode_checks_the_secret_token() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("hook");
    std::fs::write(&secret, "hook-secret-value\n").unwrap();
    let up = start(
        &server,
        &channels(
            &server,
            &format!(
                "        mode: webhook\n        webhookUrl: \"https://hub.example.com/v1/telegram/default/webhook\"\n        webhookSecret: {{source: file, path: {}}}\n        dmPolicy: open\n        allowFrom: [\"*\"]\n",
                secret.display()
            ),
            "",
        ),
    );
    connected(&up);
    let set = fake.calls_of("setWebhook");
    assert_eq!(set.len(), 1);
    assert_eq!(
        set[0].body["url"],
        "https://hub.example.com/v1/telegram/default/webhook"
    );
    assert_eq!(set[0].body["secret_token"], "hook-secret-value");
    assert!(
        fake.calls_of("getUpdates").is_empty(),
        "no polling in webhook mode"
    );

    let update = json!({"update_id": 77, "message": {"message_id": 1, "chat": private(11), "from": user(11), "text": "via webhook"}});
    let post = |secret: Option<&str>| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent.post(format!("http://{}/v1/telegram/default/webhook", up.addr));
        if let Some(s) = secret {
            request = request.header("x-telegram-bot-api-secret-token", s);
        }
        request
            .content_type("application/json")
            .send(update.to_string())
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(post(None), 401);
    assert_eq!(post(Some("hook-secret-valuX")), 401);
    assert_eq!(post(Some("hook-secret-value")), 200);
    // Telegram retrying the same update: taken once.
    assert_eq!(post(Some("hook-secret-value")), 200);
    let sent = fake.wait_sent(1);
    assert!(
        sent[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("echo: via webhook")
    );
    assert!(channel_log(&up, "telegram").contains("why=wrong-secret-token"));
    up.wait_for("one reply only", |s| {
        adapter(s, "telegram", "default")["posted"] == 1
    });
    assert_eq!(fake.sent().len(), 1);
}

/// A token the platform refuses: `auth_failed`, the hub degraded with the reason; a token
/// that does not resolve is never sent anywhere.
#[test]
fn a_refused_telegram_token_is_auth_failed_and_degrades_the_hub() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    fake.refuse_token(true);
    let up = start(&server, &channels(&server, "", ""));
    let status = up.wait_for("auth_failed", |s| {
        adapter(s, "telegram", "default")["state"] == "auth_failed"
    });
    let live = adapter(&status, "telegram", "default");
    assert!(
        live["lastError"].as_str().unwrap().contains("Unauthorized"),
        "{live:#}"
    );
    assert_eq!(status["health"]["status"], "degraded");
    assert!(
        status["health"]["reasons"][0]
            .as_str()
            .unwrap()
            .contains("telegram/default cannot connect"),
        "{status:#}"
    );
    // Fixed on the platform's side: the backoff tries again and connects.
    fake.refuse_token(false);
    connected(&up);
    let out = deepcli(&up, &["channels", "status", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["accounts"][0]["live"]["adapter"]["state"], "connected",
        "{doc:#}"
    );
    // No webhookSecret: signed POST /v1/inbound is closed, which the status says is not how
    // this account's messages arrive.
    let live = &doc["accounts"][0]["live"];
    assert_eq!(live["inbound"], "closed", "{doc:#}");
    assert!(
        live["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the platform adapter delivers this account's messages")),
        "{doc:#}"
    );
    // The token never reaches a log, and a connection that never got up is not said to have
    // dropped.
    let log = channel_log(&up, "telegram");
    assert!(!log.contains("FAKE-token"), "{log}");
    assert!(log.contains("connect-failed error="), "{log}");
    assert!(!log.contains("disconnected"), "{log}");
}

/// `channels logout` takes the running controller's connection down (and deletes the
/// webhook, forgets the identity); `channels login` checks the token, records the identity and
/// lets it connect again; `status --probe` reports the live connection.
#[test]
fn telegram_logout_and_login_while_the_controller_runs() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start(&server, &channels(&server, "", ""));
    connected(&up);
    let out = deepcli(&up, &["channels", "status", "--probe", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["accounts"][0]["probe"],
        json!({"result": "connected", "bot": format!("{BOT_ID} ({BOT_NAME})")}),
        "{doc:#}"
    );
    let deletes = fake.calls_of("deleteWebhook").len();
    let out = deepcli(
        &up,
        &["channels", "logout", "--channel", "telegram", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["forgotIdentity"], true, "{doc:#}");
    assert_eq!(doc["webhookDeleted"], true, "{doc:#}");
    assert_eq!(fake.calls_of("deleteWebhook").len(), deletes + 1);
    let status = up.wait_for("the connection down", |s| {
        adapter(s, "telegram", "default")["state"] == "disabled"
    });
    assert!(
        adapter(&status, "telegram", "default")["lastError"]
            .as_str()
            .unwrap()
            .contains("channels login"),
        "{status:#}"
    );
    // Nothing polls while logged out: a message waits for the login.
    let polls = fake.calls_of("getUpdates").len();
    fake.message(private(4), user(4), "hello?", json!({}));
    let out = deepcli(&up, &["channels", "login", "--channel", "telegram"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("bot {BOT_ID} ({BOT_NAME}); recorded")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    connected(&up);
    assert!(fake.calls_of("getUpdates").len() > polls);
    // The pairing code for the message that waited.
    fake.wait_sent(1);
    // A refused token: login says so and exits 1.
    fake.refuse_token(true);
    let out = deepcli(&up, &["channels", "login", "--channel", "telegram"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A changed credential starts the connection again with it (read at the next reconcile); a
/// disabled account's connection stops; enabled again, it connects.
#[test]
fn a_telegram_connection_follows_credential_changes_and_enabled() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "999:wrong\n").unwrap();
    let yaml = |extra: &str| {
        format!(
            "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: {{source: file, path: {}}}\n        apiBase: \"{}\"\n{extra}",
            token.display(),
            server.base()
        )
    };
    let up = Up::start_config(&sdk_agents(), &yaml(""), ALL_TO_SDK, |cmd| {
        cmd.args(["--resync", "1"])
            .env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    });
    up.wait_for("the wrong token refused", |s| {
        adapter(s, "telegram", "default")["state"] == "auth_failed"
    });
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    connected(&up);

    up.write_by_rename("channels.yaml", &yaml("        enabled: false\n"));
    up.wait_for("the account disabled", |s| {
        adapter(s, "telegram", "default")["state"] == "disabled"
    });
    // Stopped: no poll after the next one that was in flight.
    let polls = fake.calls_of("getUpdates").len();
    // Two resyncs later (over 1 s: a running poller asks every second at least)…
    let reconciles = up.status().unwrap()["reconciles"].as_u64().unwrap();
    up.wait_for("two resyncs", |s| {
        s["reconciles"].as_u64().unwrap_or(0) >= reconciles + 2
    });
    assert!(
        fake.calls_of("getUpdates").len() <= polls + 1,
        "polling went on"
    );
    up.write_by_rename("channels.yaml", &yaml(""));
    connected(&up);
}

/// A subagent spawned from a Telegram chat finishes: the parent's answer to its announce is
/// posted in that chat by the outbox (conversations.md), not only recorded. With the post held
/// by the platform, a `kill -9` of the controller loses nothing: the next controller posts it,
/// once. A chat the platform refuses gets a dead letter with the reason, in the channel's log
/// and `/metrics`.
#[test]
fn a_subagents_announce_reaches_the_telegram_chat_it_was_spawned_from() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let mut up = start_open(&server);
    fake.hold_sends(true);
    fake.message(private(5), user(5), SPAWN, json!({}));
    fake.wait("the announce on its way", |f| {
        f.calls_of("sendMessage")
            .iter()
            .any(|c| is_announce(c.body["text"].as_str().unwrap_or_default()))
    });
    let queued = count(
        &up.state,
        "SELECT count(*) FROM outbox WHERE cause = 'announce' AND state = 'waiting'",
    );
    assert_eq!(
        queued, 1,
        "the announce waits in the outbox while it is posted"
    );
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    fake.abandon_held();
    restart(&mut up);
    fake.wait("the announce posted after the restart", |f| {
        f.sent()
            .iter()
            .any(|s| is_announce(s["text"].as_str().unwrap_or_default()))
    });
    let announce = fake
        .sent()
        .into_iter()
        .find(|s| is_announce(s["text"].as_str().unwrap_or_default()))
        .unwrap();
    assert_eq!(announce["chat_id"], 5, "{announce}");
    up.wait_for("the announce marked posted", |_| {
        count(
            &up.state,
            "SELECT count(*) FROM outbox WHERE cause = 'announce' AND state = 'posted' AND carrier = 'telegram'",
        ) == 1
    });
    let posted = fake
        .sent()
        .iter()
        .filter(|s| is_announce(s["text"].as_str().unwrap_or_default()))
        .count();
    assert_eq!(posted, 1, "posted once");
    assert!(
        channel_log(&up, "telegram").contains("outbound cause=announce"),
        "{}",
        channel_log(&up, "telegram")
    );

    // A chat the platform refuses: the announce becomes a dead letter with the reason.
    fake.unwritable(6);
    fake.message(private(6), user(6), SPAWN, json!({}));
    up.wait_for("the announce dead-lettered", |_| {
        count(
            &up.state,
            "SELECT count(*) FROM dead_letters WHERE message_id LIKE 'announce:%' AND peer_id = '6' AND last_error LIKE '%chat not found%'",
        ) == 1
    });
    let log = channel_log(&up, "telegram");
    assert!(
        log.lines()
            .any(|l| l.contains("dead-letter cause=announce") && l.contains("chat not found")),
        "{log}"
    );
    let metrics = metrics(&up);
    assert!(
        metrics.contains(
            "deepcli_outbox_dead_letters_total{cause=\"announce\",carrier=\"telegram\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("deepcli_outbox_posted_total{cause=\"announce\",carrier=\"telegram\"}"),
        "{metrics}"
    );
}

/// [`start_open`], the SDK agent asking its approvals in the chat (`route: origin`, 120 s) of
/// `approver`.
fn start_approving(server: &Server, approver: &str) -> Up {
    let agents = format!(
        "{}      permissions: {{route: origin, timeoutSeconds: 120, approvers: [\"{approver}\"]}}\n",
        sdk_agents()
    );
    let up = Up::start_config(
        &agents,
        &channels(server, OPEN_DMS, ""),
        ALL_TO_SDK,
        |cmd| {
            cmd.env("TG_TOKEN", TOKEN)
                .env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
        },
    );
    connected(&up);
    up
}

/// An approval asked in a Telegram chat (conversations.md, "Approvals in the chat, with
/// buttons"): the prompt answers the asking message with an inline keyboard; a click by a
/// sender who is no approver is answered privately and decides nothing; the approver's click
/// lets the agent's tool call run, and the prompt's message is edited with the outcome, its
/// keyboard gone. `callback_query` is asked for in `allowed_updates`.
#[test]
fn an_approval_in_a_telegram_chat_is_decided_with_its_buttons() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start_approving(&server, "telegram:77");
    fake.wait("the first poll", |f| !f.calls_of("getUpdates").is_empty());
    let polls = fake.calls_of("getUpdates");
    assert!(
        polls[0].body["allowed_updates"]
            .as_array()
            .unwrap()
            .contains(&json!("callback_query")),
        "{:?}",
        polls[0].body
    );
    let asked = fake.message(
        private(5),
        user(5),
        "permission delete /tmp/cache",
        json!({}),
    );
    fake.wait("the approval's prompt", |f| {
        f.sent().iter().any(|s| s.get("reply_markup").is_some())
    });
    let prompt = fake
        .calls_of("sendMessage")
        .into_iter()
        .find(|c| c.answered && c.body.get("reply_markup").is_some())
        .unwrap();
    assert_eq!(prompt.body["chat_id"], 5);
    assert_eq!(
        prompt.body["reply_parameters"]["message_id"], asked["message"]["message_id"],
        "it answers the asking message"
    );
    let buttons = prompt.body["reply_markup"]["inline_keyboard"][0]
        .as_array()
        .unwrap()
        .clone();
    let labels: Vec<&str> = buttons
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["Approve once", "Always", "Deny"]);
    let approve = buttons[0]["callback_data"].as_str().unwrap().to_string();
    let id = approve
        .strip_prefix("deepcli:approve:")
        .unwrap()
        .to_string();
    let message_id = prompt.message_id.unwrap();

    // The asker is no approver: told so privately, nothing decided.
    let refused = fake.click(private(5), user(5), message_id, &approve);
    let answer = answer_of(fake, &refused);
    assert!(answer.contains("not an approver"), "{answer}");
    let log = channel_log(&up, "telegram");
    assert!(
        log.contains(&format!("click-refused approval={id} by=telegram:5")),
        "{log}"
    );
    let pending = deepcli(&up, &["approvals", "show", &id, "--json"]);
    let shown: Value = serde_json::from_slice(&pending.stdout).unwrap();
    assert_eq!(shown["approval"]["state"], "pending", "{shown}");

    // The approver's click decides: the agent's tool call runs, the prompt shows the outcome.
    let approved = fake.click(private(5), user(77), message_id, &approve);
    fake.wait("the agent's answer", |f| {
        texts(&f.sent())
            .iter()
            .any(|t| t.starts_with("permission: allow"))
    });
    fake.wait("the prompt edited", |f| {
        !f.calls_of("editMessageText").is_empty()
    });
    let edit = &fake.calls_of("editMessageText")[0];
    assert_eq!(edit.body["message_id"], message_id);
    assert_eq!(edit.body["chat_id"], 5);
    let edited = edit.body["text"].as_str().unwrap();
    assert!(edited.contains("approved by telegram:77"), "{edited}");
    assert!(
        edit.body.get("reply_markup").is_none(),
        "the keyboard is gone"
    );
    let answer = answer_of(fake, &approved);
    assert!(answer.contains("approved by telegram:77"), "{answer}");
}

/// The text `answerCallbackQuery` showed the clicker of callback query `id`, once it came.
fn answer_of(fake: &Fake, id: &str) -> String {
    let find = |f: &Fake| {
        f.calls_of("answerCallbackQuery")
            .into_iter()
            .find(|c| c.body["callback_query_id"] == id)
    };
    fake.wait("the click's answer", |f| find(f).is_some());
    find(fake).unwrap().body["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `/approve <id>` typed in the very chat whose turn waits for it is answered at once: the
/// command does not queue behind that turn in the chat's lane (approvals.md).
#[test]
fn an_approval_command_in_the_asking_chat_does_not_wait_behind_the_turn() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let _up = start_approving(&server, "telegram:5");
    fake.message(
        private(5),
        user(5),
        "permission delete /tmp/cache",
        json!({}),
    );
    fake.wait("the approval's prompt", |f| {
        f.sent().iter().any(|s| s.get("reply_markup").is_some())
    });
    let prompt = fake
        .sent()
        .into_iter()
        .find(|s| s.get("reply_markup").is_some())
        .unwrap();
    let data = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_string();
    let id = data.strip_prefix("deepcli:approve:").unwrap();
    fake.message(private(5), user(5), &format!("/approve {id}"), json!({}));
    fake.wait("the command's answer and the agent's", |f| {
        let texts = texts(&f.sent());
        texts.iter().any(|t| t.contains("approved by telegram:5"))
            && texts.iter().any(|t| t.starts_with("permission: allow"))
    });
}

/// `/status` in a chat whose turn is still running is answered at once, not after the turn:
/// it reports on that turn (conversations.md).
#[test]
fn status_in_a_busy_chat_is_answered_beside_the_turn() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start_open(&server);
    // Inside the agent's workspace: its sandbox sees nothing else of the state directory.
    let gate = up.state.join("workspaces/sdk/release-the-turn");
    fake.message(
        private(6),
        user(6),
        &format!("hold {}", gate.display()),
        json!({}),
    );
    up.wait_for("the turn running", |_| {
        crate::common::count(&up.state, "SELECT count(*) FROM turns_started") == 1
    });
    fake.message(private(6), user(6), "/status", json!({}));
    fake.wait("the status, while the turn holds", |f| {
        texts(&f.sent()).iter().any(|t| t.contains("queue"))
    });
    assert!(
        !texts(&fake.sent())
            .iter()
            .any(|t| t.starts_with("echo: hold")),
        "the turn has not answered yet"
    );
    std::fs::write(&gate, "").unwrap();
    fake.wait("the held turn's answer", |f| {
        texts(&f.sent()).iter().any(|t| t.starts_with("echo: hold"))
    });
}

/// The console's cookie for `up`: the operator token exchanged at the login form.
fn console_cookie(up: &Up) -> String {
    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let answer = agent
        .post(&format!("http://{}/console/login", up.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .send(format!("token={}", token.trim()))
        .unwrap();
    assert_eq!(answer.status().as_u16(), 303);
    let cookie = answer
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// A console page (or stream), signed in.
fn console_get(up: &Up, cookie: &str, path: &str) -> ureq::http::Response<ureq::Body> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into();
    agent
        .get(&format!("http://{}{path}", up.addr))
        .header("cookie", cookie)
        .call()
        .unwrap()
}

/// The session key of the conversation whose key contains `part`.
fn session_with(up: &Up, part: &str) -> String {
    let out = deepcli(up, &["sessions", "list", "--contains", part, "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    list["sessions"][0]["sessionKey"]
        .as_str()
        .unwrap_or_else(|| panic!("no session with {part}: {list:#}"))
        .to_string()
}

/// `sessions history KEY`: human, and JSON's messages.
fn history(up: &Up, key: &str) -> (String, Vec<Value>) {
    let human = deepcli(up, &["sessions", "history", key]);
    assert!(human.status.success());
    let json = deepcli(up, &["sessions", "history", key, "--json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    (
        String::from_utf8_lossy(&human.stdout).into_owned(),
        json["messages"].as_array().unwrap().clone(),
    )
}

/// Messages the inbound policy gated show in their session's history, in order among its
/// lines, with who sent them and the gate that decided — `sessions history` (human and JSON)
/// and the console's transcript, live — and the agent never gets them from the history:
/// a stranger's DM held for pairing (its code never shown), and a group message that did not
/// mention the bot (kept as context).
#[test]
fn gated_telegram_messages_show_in_the_history_and_the_console_transcript() {
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let up = start(&server, &channels(&server, "", "    groupPolicy: open\n"));
    connected(&up);

    // A stranger's DM: a pairing code, and no turn.
    fake.message(private(42), user(42), "hello", json!({}));
    let pairing = fake.wait_sent(1)[0]["text"].as_str().unwrap().to_string();
    let code = pairing
        .split("code is ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_string();
    assert!(
        deepcli(&up, &["pairing", "approve", "telegram", &code])
            .status
            .success()
    );
    fake.message(private(42), user(42), "hello again", json!({}));
    fake.wait_sent(2);
    // A DM speaks in the session the route gives it (dmScope main: the agent's main one),
    // gated or not.
    let dm = session_with(&up, "sdk:main");
    assert_eq!(dm, "agent:sdk:main");
    let (human, mut messages) = history(&up, &dm);
    // deepcli's notes about the runtime session aside.
    messages.retain(|m| m["provenance"] != "acp");
    let said: Vec<(&str, bool)> = messages
        .iter()
        .map(|m| (m["text"].as_str().unwrap(), m.get("gated").is_some()))
        .collect();
    assert_eq!(
        &said[..2],
        [("hello", true), ("hello again", false)],
        "{messages:#?}"
    );
    assert!(said[2].0.starts_with("echo: hello again"), "{messages:#?}");
    let gated = &messages[0];
    assert_eq!(gated["provenance"], "inbound");
    assert_eq!(gated["gated"]["reason"], "pairing-required");
    assert!(
        gated["gated"]["rule"]
            .as_str()
            .unwrap()
            .starts_with("dmPolicy"),
        "{gated:#}"
    );
    assert_eq!(gated["sender"]["kind"], "person");
    assert_eq!(gated["sender"]["id"], "42");
    assert_eq!(gated["sender"]["channel"], "telegram");
    assert!(messages[0]["id"].as_i64() < messages[1]["id"].as_i64());
    assert!(
        human.contains(
            "[inbound, gated] Ada (42) on telegram: hello\n    gated: pairing-required by dmPolicy"
        ),
        "{human}"
    );
    assert!(
        human.contains("not delivered: the agent never saw it"),
        "{human}"
    );
    assert!(
        human.contains("[agent] agent sdk: echo: hello again"),
        "{human}"
    );
    let json_text = serde_json::to_string(&messages).unwrap();
    assert!(
        !human.contains(&code) && !json_text.contains(&code),
        "the pairing code is never shown"
    );

    // The console's transcript of the DM: the gate, never the code.
    let cookie = console_cookie(&up);
    let page = console_get(
        &up,
        &cookie,
        &format!(
            "/console/conversations/session?key={}",
            dm.replace(':', "%3A")
        ),
    )
    .into_body()
    .read_to_string()
    .unwrap();
    assert!(
        page.contains("gated: pairing-required by dmPolicy"),
        "{page}"
    );
    assert!(page.contains(r#"from-person gated""#), "{page}");
    assert!(!page.contains(&code), "the pairing code is never shown");

    // A group: a mention is answered; a live view of it opens; a message without one is
    // gated and appears in the view.
    let group = json!({"id": -100_500, "type": "supergroup", "title": "Team"});
    let mention = format!("@{BOT_NAME} ready?");
    fake.message(
        group.clone(),
        user(7),
        &mention,
        json!({"entities": [{"type": "mention", "offset": 0, "length": BOT_NAME.len() + 1}]}),
    );
    fake.wait_sent(3);
    let room = session_with(&up, "group:-100500");
    let (_, before) = history(&up, &room);
    let last = before.last().unwrap()["id"].as_i64().unwrap();
    let live = console_get(
        &up,
        &cookie,
        &format!(
            "/console/conversations/live?key={}&after={last}",
            room.replace(':', "%3A")
        ),
    );
    assert_eq!(live.status().as_u16(), 200);
    fake.message(group.clone(), user(8), "just us talking", json!({}));
    let mut stream = std::io::BufReader::new(live.into_body().into_reader());
    let event = loop {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut stream, &mut line).unwrap() > 0,
            "the live view ended"
        );
        if let Some(data) = line.strip_prefix("data: ") {
            break serde_json::from_str::<Value>(data).unwrap();
        }
    };
    assert_eq!(event["text"], "just us talking", "{event:#}");
    assert_eq!(event["sender"], "Ada (8) on telegram");
    assert!(
        event["gate"]
            .as_str()
            .unwrap()
            .starts_with("gated: not-mentioned by requireMention"),
        "{event:#}"
    );
    assert!(
        event["fate"].as_str().unwrap().contains("kept as context"),
        "{event:#}"
    );
    assert!(event["id"].as_i64().unwrap() > last);
    // The agent's own history tool never has them: it was never given them.
    let asked = deepcli(
        &up,
        &[
            "sessions",
            "send",
            &dm,
            r#"mcp sessions_history {"sessionKey": "agent:sdk:main"}"#,
        ],
    );
    let reply = String::from_utf8_lossy(&asked.stdout).trim().to_string();
    let seen: Value = serde_json::from_str(
        reply
            .strip_prefix("mcp: ")
            .unwrap_or_else(|| panic!("{reply}")),
    )
    .unwrap();
    let texts: Vec<&str> = seen["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(texts.contains(&"hello again"), "{seen:#}");
    assert!(
        !texts.contains(&"hello"),
        "the gated DM is not the agent's to read: {seen:#}"
    );

    let (human, messages) = history(&up, &room);
    assert_eq!(messages.len(), before.len() + 1);
    assert_eq!(messages.last().unwrap()["gated"]["reason"], "not-mentioned");
    assert!(
        human.ends_with("[inbound, gated] Ada (8) on telegram: just us talking\n    gated: not-mentioned by requireMention (built-in default: true); not delivered: kept as context for the agent's next answer here (up to historyLimit)\n"),
        "{human}"
    );
}
