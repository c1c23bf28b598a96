//! The inbound policy end to end (policy.md): `deepcli up` gating signed envelopes before they
//! reach the echo agent on the ACP TypeScript SDK — every gate reason with the setting that
//! decided it, pairing from the request to the delivered message (CLI and JSON-RPC, while the
//! controller runs), group messages kept as context, bot-loop cooldown, and bad input.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Up, bin};

const SECRET: &str = "policy-webhook-secret";

/// One HTTP call: status and body (JSON when it parses, else the text).
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let answer = crate::common::http(addr, method, path, headers, body);
    (answer.status, answer.body)
}

/// `POST /v1/inbound`, signed.
fn inbound(up: &Up, envelope: &Value) -> (u16, Value) {
    crate::common::signed_inbound(up.addr, SECRET.as_bytes(), envelope)
}

fn token(up: &Up) -> String {
    std::fs::read_to_string(up.state.join("operator-token")).unwrap()
}

/// The Prometheus text of `/metrics`.
fn metrics(up: &Up) -> String {
    let (_, text) = call(
        up.addr,
        "GET",
        "/metrics",
        &[("authorization", &format!("Bearer {}", token(up)))],
        b"",
    );
    text.as_str().unwrap().to_string()
}

/// The value of one metric line (labels as written), 0 when absent.
fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A JSON-RPC call to the running controller.
fn rpc(up: &Up, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": format!("_mustang.agent/{method}"), "params": params});
    let (status, answer) = call(
        up.addr,
        "POST",
        "/rpc",
        &[
            ("authorization", &format!("Bearer {}", token(up))),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{answer:#}");
    answer
}

/// `deepcli <args>` on the controller's directories.
fn deepcli(up: &Up, args: &[&str]) -> std::process::Output {
    up.deepcli(args)
}

/// agents.yaml: `helper` (identity name Helper) runs the SDK echo agent.
fn agents() -> String {
    format!(
        "agents:\n  list:\n    - id: main\n    - id: helper\n      identity: {{name: Helper}}\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        crate::common::sdk_echo_agent().display()
    )
}

const TO_HELPER: &str =
    "bindings:\n  - {agentId: helper, match: {channel: slack, accountId: \"*\"}}\n";

/// One account per gate, on Slack.
const CHANNELS: &str = r#"channels:
  slack:
    groups:
      C-OPEN: {}
      C-FEW: {groupAllowFrom: ["U-ALLOWED"]}
    accounts:
      default:
        webhookSecret: {source: env, id: HOOK}
        botUserId: B-SELF
        dmPolicy: allowlist
        allowFrom: ["U-ALLOWED"]
        allowBots: mentions
      closed:
        webhookSecret: {source: env, id: HOOK}
        dmPolicy: disabled
        groupPolicy: disabled
      pairing:
        webhookSecret: {source: env, id: HOOK}
      bots:
        webhookSecret: {source: env, id: HOOK}
        botUserId: B-BOTS
        allowBots: true
        groupPolicy: open
        requireMention: false
        groupAllowFrom: []
        botLoopProtection: {maxEventsPerWindow: 2, cooldownSeconds: 1}
      nobots:
        webhookSecret: {source: env, id: HOOK}
        dmPolicy: open
        allowFrom: ["*"]
"#;

fn start(channels: &str) -> Up {
    let up = Up::start_config(&agents(), channels, TO_HELPER, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("helper ready", |s| {
        Up::runtime(s, "helper").is_some_and(|r| r["status"] == "ready")
    });
    up
}

/// A message to `account`: direct from `sender` (`peer` None) or in group `peer`.
fn message(account: &str, peer: Option<&str>, sender: &str, id: &str, text: &str) -> Value {
    let peer = match peer {
        Some(group) => json!({"kind": "group", "id": group}),
        None => json!({"kind": "direct", "id": sender}),
    };
    json!({"channel": "slack", "accountId": account, "peer": peer, "messageId": id,
           "sender": {"id": sender, "name": format!("{sender} name")}, "text": text})
}

fn bot(mut envelope: Value) -> Value {
    envelope["sender"]["isBot"] = true.into();
    envelope
}

fn mentioning(mut envelope: Value, id: &str) -> Value {
    envelope["mentions"] = json!([id]);
    envelope
}

/// Asserts a gated answer: 200, not delivered, `reason`, a rule that starts with `rule`.
fn assert_gated(answer: &(u16, Value), reason: &str, rule: &str) {
    let (status, body) = answer;
    assert_eq!(*status, 200, "{body:#}");
    assert_eq!(body["delivered"], false, "{body:#}");
    assert_eq!(body["gated"]["reason"], reason, "{body:#}");
    let said = body["gated"]["rule"].as_str().unwrap_or_default();
    assert!(
        said.starts_with(rule),
        "rule `{said}` does not start with `{rule}`"
    );
    assert_eq!(body["route"]["agentId"], "helper", "{body:#}");
}

fn reply(answer: &(u16, Value)) -> String {
    assert_eq!(answer.0, 200, "{:#}", answer.1);
    answer.1["reply"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply: {:#}", answer.1))
        .to_string()
}

#[test]
fn every_gate_reason_is_answered_recorded_counted_and_logged() {
    let up = start(CHANNELS);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "self",
            message("default", None, "B-SELF", "g-1", "hi"),
            "self",
            "channels.slack.accounts.default.botUserId (channels.yaml:9)",
        ),
        (
            "bot",
            bot(message("nobots", None, "B-X", "g-2", "hi")),
            "bot",
            "allowBots (built-in default: false)",
        ),
        (
            "bot-not-mentioned",
            bot(message("default", Some("C-OPEN"), "U-ALLOWED", "g-3", "hi")),
            "bot-not-mentioned",
            "channels.slack.accounts.default.allowBots (channels.yaml:12)",
        ),
        (
            "dm-disabled",
            message("closed", None, "U-ALLOWED", "g-4", "hi"),
            "dm-disabled",
            "channels.slack.accounts.closed.dmPolicy (channels.yaml:15)",
        ),
        (
            "dm-not-allowed",
            message("default", None, "U-STRANGER", "g-5", "hi"),
            "dm-not-allowed",
            "channels.slack.accounts.default.allowFrom (channels.yaml:11)",
        ),
        (
            "pairing-required",
            message("pairing", None, "U-NEW", "g-6", "hi"),
            "pairing-required",
            "dmPolicy (built-in default: pairing)",
        ),
        (
            "group-disabled",
            message("closed", Some("C-OPEN"), "U-ALLOWED", "g-7", "hi"),
            "group-disabled",
            "channels.slack.accounts.closed.groupPolicy (channels.yaml:16)",
        ),
        (
            "group-not-allowed",
            message("default", Some("C-ELSEWHERE"), "U-ALLOWED", "g-8", "hi"),
            "group-not-allowed",
            "groupPolicy (built-in default: allowlist)",
        ),
        (
            "sender-not-allowed",
            message("default", Some("C-FEW"), "U-OTHER", "g-9", "hi"),
            "sender-not-allowed",
            "channels.slack.groups.C-FEW.groupAllowFrom (channels.yaml:5)",
        ),
        (
            "not-mentioned",
            message("default", Some("C-OPEN"), "U-ALLOWED", "g-10", "hi"),
            "not-mentioned",
            "requireMention (built-in default: true)",
        ),
    ];
    for (what, envelope, reason, rule) in &cases {
        let answer = inbound(&up, envelope);
        assert_gated(&answer, reason, rule);
        assert!(
            answer.1["reply"].is_null() || *reason == "pairing-required",
            "{what}: {:#}",
            answer.1
        );
        // The same message again: the same answer, recorded.
        let again = inbound(&up, envelope);
        assert_eq!(again.0, 200, "{what}");
        assert_eq!(again.1["duplicate"], true, "{what}: {:#}", again.1);
        assert_eq!(again.1["gated"], answer.1["gated"], "{what}");
    }
    // What gets through: mentioned by id, by the agent's name, as a reply to the bot.
    let by_id = mentioning(
        message("default", Some("C-OPEN"), "U-ALLOWED", "d-1", "by id"),
        "B-SELF",
    );
    assert!(reply(&inbound(&up, &by_id)).starts_with("echo: "));
    let by_name = message(
        "default",
        Some("C-OPEN"),
        "U-ALLOWED",
        "d-2",
        "hey @helper, by name",
    );
    assert!(reply(&inbound(&up, &by_name)).contains("hey @helper, by name"));
    let mut as_reply = message("default", Some("C-OPEN"), "U-ALLOWED", "d-3", "as a reply");
    as_reply["replyToSenderId"] = "B-SELF".into();
    assert!(reply(&inbound(&up, &as_reply)).contains("as a reply"));
    let allowed_dm = message("default", None, "U-ALLOWED", "d-4", "allowed");
    assert!(reply(&inbound(&up, &allowed_dm)).contains("allowed"));
    let bot_mentioning = bot(mentioning(
        message("default", Some("C-OPEN"), "U-ALLOWED", "d-5", "a bot asks"),
        "B-SELF",
    ));
    assert!(reply(&inbound(&up, &bot_mentioning)).contains("a bot asks"));

    // Counted by channel, account and reason, once per message (not per redelivery).
    let text = metrics(&up);
    for (account, reason) in [
        ("default", "self"),
        ("nobots", "bot"),
        ("default", "bot-not-mentioned"),
        ("closed", "dm-disabled"),
        ("default", "dm-not-allowed"),
        ("pairing", "pairing-required"),
        ("closed", "group-disabled"),
        ("default", "group-not-allowed"),
        ("default", "sender-not-allowed"),
        ("default", "not-mentioned"),
    ] {
        let line = format!(
            "deepcli_inbound_gated_total{{channel=\"slack\",account=\"{account}\",reason=\"{reason}\"}}"
        );
        assert_eq!(metric(&text, &line), 1.0, "{line}\n{text}");
    }
    // And in the channel's log, with the rule, never a pairing code.
    let log = std::fs::read_to_string(up.state.join("logs/channels/slack.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains(" 200 account=default ")
            && l.contains(" agent=helper ")
            && l.ends_with(" gated=not-mentioned rule=requireMention (built-in default: true)")),
        "{log}"
    );
    let code = inbound(&up, &cases[5].1).1["gated"]["pairingCode"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !log.contains(&code),
        "the pairing code is in the log: {log}"
    );
}

#[test]
fn pairing_from_request_to_delivered_message_while_the_controller_runs() {
    let up = start(CHANNELS);
    let dm = |id: &str, text: &str| message("pairing", None, "U-NEW", id, text);

    // The first message: a request, with a code the sender is to give the operator.
    let first = inbound(&up, &dm("p-1", "hello?"));
    assert_gated(
        &first,
        "pairing-required",
        "dmPolicy (built-in default: pairing)",
    );
    let code = first.1["gated"]["pairingCode"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(code.len(), 8, "{code}");
    assert!(
        reply(&first).contains(&code),
        "the reply tells the code: {:#}",
        first.1
    );
    // Asking again gives no new code, and says nothing (no reply to send).
    let second = inbound(&up, &dm("p-2", "hello??"));
    assert_gated(&second, "pairing-required", "dmPolicy");
    assert_eq!(second.1["gated"]["pairingPending"], true, "{:#}", second.1);
    assert!(second.1["gated"]["pairingCode"].is_null());
    assert!(second.1["reply"].is_null());

    // The operator lists it (the CLI, on the running controller's state)…
    let out = deepcli(&up, &["pairing", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pending = &listed["pending"][0];
    assert_eq!(
        (
            pending["channel"].as_str(),
            pending["accountId"].as_str(),
            pending["senderId"].as_str(),
            pending["code"].as_str()
        ),
        (
            Some("slack"),
            Some("pairing"),
            Some("U-NEW"),
            Some(code.as_str())
        ),
        "{listed:#}"
    );
    assert_eq!(pending["senderName"], "U-NEW name");
    // …a wrong code is refused…
    let out = deepcli(&up, &["pairing", "approve", "slack", "AAAA-BBBB"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no pending pairing request"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // …and the right one, typed carelessly, approved.
    let out = deepcli(
        &up,
        &[
            "pairing",
            "approve",
            "slack",
            &format!(" {} ", code.to_lowercase()),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Approved sender U-NEW"));

    // The next message is delivered: the controller reads approvals from the database.
    let third = inbound(&up, &dm("p-3", "now?"));
    assert!(reply(&third).contains("now?"), "{:#}", third.1);
    // The earlier, gated message keeps its answer.
    assert_eq!(
        inbound(&up, &dm("p-1", "hello?")).1["gated"]["reason"],
        "pairing-required"
    );

    // channels list shows the paired sender; the JSON-RPC lists it too.
    let out = deepcli(&up, &["channels", "list", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let account = list["channels"][0]["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "pairing")
        .unwrap()
        .clone();
    assert_eq!(account["pairedSenders"], json!(["U-NEW"]), "{list:#}");
    let listed = rpc(&up, "pairing/list", json!({"channel": "slack"}));
    assert_eq!(
        listed["result"]["paired"][0]["senderId"], "U-NEW",
        "{listed:#}"
    );
    assert_eq!(listed["result"]["pending"], json!([]));

    // Revoked over JSON-RPC: the sender has to pair again.
    let revoked = rpc(
        &up,
        "pairing/revoke",
        json!({"channel": "slack", "sender": "U-NEW"}),
    );
    assert_eq!(
        revoked["result"]["revoked"][0]["accountId"], "pairing",
        "{revoked:#}"
    );
    let fourth = inbound(&up, &dm("p-4", "still me"));
    assert_gated(&fourth, "pairing-required", "dmPolicy");
    let new_code = fourth.1["gated"]["pairingCode"].as_str().unwrap();
    assert_ne!(new_code, code);
    let approved = rpc(
        &up,
        "pairing/approve",
        json!({"channel": "slack", "code": new_code, "account": "pairing"}),
    );
    assert_eq!(
        approved["result"]["approved"]["senderId"], "U-NEW",
        "{approved:#}"
    );
    assert!(reply(&inbound(&up, &dm("p-5", "back"))).contains("back"));

    // `inbound send` says as much to the operator: the code and what the sender is told, then
    // that the request is pending.
    let send = |id: &str| {
        let out = deepcli(
            &up,
            &[
                "inbound",
                "send",
                "--channel",
                "slack",
                "--account",
                "pairing",
            ]
            .into_iter()
            .chain([
                "--peer",
                "direct:U-CLI",
                "--sender",
                "U-CLI",
                "--message-id",
                id,
                "hi",
            ])
            .collect::<Vec<_>>(),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let told = send("c-1");
    assert!(told.contains("not delivered: pairing-required"), "{told}");
    assert!(told.contains("pairing code "), "{told}");
    assert!(
        told.contains("the sender is told: This bot only answers people its operator approved."),
        "{told}"
    );
    let again = send("c-2");
    assert!(
        again.contains("this sender's pairing request is pending (until "),
        "{again}"
    );
    assert!(!again.contains("the sender is told"), "{again}");
}

#[test]
fn guessed_pairing_codes_are_limited_and_the_fourth_sender_drops_the_oldest() {
    let up = start(CHANNELS);
    let mut codes = Vec::new();
    for (i, sender) in ["U-1", "U-2", "U-3", "U-4"].iter().enumerate() {
        let answer = inbound(
            &up,
            &message("pairing", None, sender, &format!("q-{i}"), "hi"),
        );
        codes.push(
            answer.1["gated"]["pairingCode"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let listed = rpc(&up, "pairing/list", json!({}));
    let senders: Vec<&str> = listed["result"]["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["senderId"].as_str().unwrap())
        .collect();
    assert_eq!(
        senders,
        ["U-2", "U-3", "U-4"],
        "at most 3 wait, the oldest dropped"
    );

    // Ten wrong codes, then approve pauses for the channel: even the right code waits.
    let wrong = [
        "AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE", "FFFFFFFF", "GGGGGGGG",
        "HHHHHHHH", "JJJJJJJJ", "KKKKKKKK",
    ];
    for (i, guess) in wrong.iter().enumerate() {
        let answer = rpc(
            &up,
            "pairing/approve",
            json!({"channel": "slack", "code": guess}),
        );
        assert_eq!(answer["error"]["code"], -32001, "guess {i}: {answer:#}");
    }
    let locked = rpc(
        &up,
        "pairing/approve",
        json!({"channel": "slack", "code": codes[3]}),
    );
    assert_eq!(locked["error"]["code"], -32002, "{locked:#}");
    assert!(
        locked["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many wrong pairing codes"),
        "{locked:#}"
    );
    // Not a code at all: told so, without counting.
    let out = deepcli(&up, &["pairing", "approve", "slack", "0O1I"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a pairing code"));
}

#[test]
fn group_messages_not_addressed_to_the_agent_are_its_context_next_time() {
    let channels = CHANNELS.replace(
        "        allowBots: mentions\n",
        "        allowBots: mentions\n        historyLimit: 2\n",
    );
    let up = start(&channels);
    let said = |id: &str, text: &str| message("default", Some("C-OPEN"), "U-ALLOWED", id, text);
    for (id, text) in [
        ("c-1", "first aside"),
        ("c-2", "second aside"),
        ("c-3", "third aside"),
    ] {
        assert_gated(
            &inbound(&up, &said(id, text)),
            "not-mentioned",
            "requireMention",
        );
    }
    // A redelivery is not kept twice.
    assert_eq!(
        inbound(&up, &said("c-3", "third aside")).1["duplicate"],
        true
    );
    // Kept in the state database: a restarted controller gives them all the same.
    let mut up = up;
    assert!(up.terminate().success());
    up.restart(|cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("helper ready again", |s| {
        Up::runtime(s, "helper").is_some_and(|r| r["status"] == "ready")
    });

    let answer = reply(&inbound(
        &up,
        &mentioning(said("c-4", "what do you think?"), "B-SELF"),
    ));
    // historyLimit 2: the two newest, under a heading, before the message.
    assert!(!answer.contains("first aside"), "{answer}");
    let second = answer.find("U-ALLOWED name: second aside").expect(&answer);
    let third = answer.find("U-ALLOWED name: third aside").expect(&answer);
    let question = answer.find("what do you think?").expect(&answer);
    assert!(second < third && third < question, "{answer}");
    assert!(answer.contains("not addressed to it"), "{answer}");
    // Given once, then cleared.
    let next = reply(&inbound(
        &up,
        &mentioning(said("c-5", "and now?"), "B-SELF"),
    ));
    assert!(!next.contains("aside"), "{next}");
    assert!(next.contains("and now?"), "{next}");

    // In a thread the agent answered in, no mention is needed (threadParticipation).
    let mut in_thread = mentioning(said("t-1", "start a thread"), "B-SELF");
    in_thread["threadId"] = "T1".into();
    reply(&inbound(&up, &in_thread));
    let mut follow_up = said("t-2", "a follow-up");
    follow_up["threadId"] = "T1".into();
    assert!(reply(&inbound(&up, &follow_up)).contains("a follow-up"));
    // A thread it did not answer in still needs one.
    let mut other_thread = said("t-3", "elsewhere");
    other_thread["threadId"] = "T2".into();
    assert_gated(
        &inbound(&up, &other_thread),
        "not-mentioned",
        "requireMention",
    );
}

#[test]
fn two_bots_answering_each_other_are_muted_for_the_cooldown() {
    let up = start(CHANNELS);
    let from_bot = |id: String| bot(message("bots", Some("C-ANY"), "B-OTHER", &id, "ping"));
    // maxEventsPerWindow 2: two get through, the third trips the protection.
    for i in 0..2 {
        reply(&inbound(&up, &from_bot(format!("b-{i}"))));
    }
    assert_gated(
        &inbound(&up, &from_bot("b-2".into())),
        "bot-loop",
        "channels.slack.accounts.bots.botLoopProtection.maxEventsPerWindow (channels.yaml:26)",
    );
    // The operator is told: a counter and the channel's log.
    let text = metrics(&up);
    assert_eq!(
        metric(
            &text,
            "deepcli_bot_loop_trips_total{channel=\"slack\",account=\"bots\"}"
        ),
        1.0,
        "{text}"
    );
    let log = std::fs::read_to_string(up.state.join("logs/channels/slack.log")).unwrap();
    assert!(
        log.contains("bot-loop tripped account=bots bot=B-OTHER muted for 1 s (botLoopProtection)"),
        "{log}"
    );
    // Another bot is another pair.
    let other = bot(message("bots", Some("C-ANY"), "B-THIRD", "x-1", "hello"));
    reply(&inbound(&up, &other));
    // Muted until the cooldown (1 s) is over, then taken again.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut muted = 0;
    let delivered = loop {
        assert!(Instant::now() < deadline, "still muted after 30 s");
        let answer = inbound(&up, &from_bot(format!("b-wait-{muted}")));
        if answer.1["gated"].is_null() {
            break answer;
        }
        assert_eq!(answer.1["gated"]["reason"], "bot-loop", "{:#}", answer.1);
        muted += 1;
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(muted > 0, "the pair was muted for a while");
    assert!(reply(&delivered).contains("ping"));
}

#[test]
fn bad_policy_input_is_refused_by_name_and_a_large_allowlist_works() {
    let crowd: Vec<String> = (0..10_000).map(|i| format!("\"U{i:05}\"")).collect();
    let channels = format!(
        "{CHANNELS}      crowd:\n        webhookSecret: {{source: env, id: HOOK}}\n        dmPolicy: allowlist\n        allowFrom: [{}]\n",
        crowd.join(", ")
    );
    let up = start(&channels);
    assert!(
        reply(&inbound(
            &up,
            &message("crowd", None, "U09999", "l-1", "in the crowd")
        ))
        .contains("in the crowd")
    );
    assert_gated(
        &inbound(&up, &message("crowd", None, "U10000", "l-2", "not in it")),
        "dm-not-allowed",
        "channels.slack.accounts.crowd.allowFrom (channels.yaml:",
    );
    for (field, patch) in [
        ("mentions", json!({"mentions": "B-SELF"})),
        ("mentions", json!({"mentions": [{"id": "B-SELF"}]})),
        ("sender", json!({"sender": "U-ALLOWED"})),
        (
            "sender.isBot",
            json!({"sender": {"id": "U-ALLOWED", "isBot": "yes"}}),
        ),
        ("replyToSenderId", json!({"replyToSenderId": ["B-SELF"]})),
    ] {
        let mut envelope = message("default", Some("C-OPEN"), "U-ALLOWED", "bad", "hi");
        for (k, v) in patch.as_object().unwrap() {
            envelope[k] = v.clone();
        }
        let (status, body) = inbound(&up, &envelope);
        assert_eq!(status, 400, "{field}: {body:#}");
        assert_eq!(body["field"], field, "{body:#}");
    }
    // An invalid mention pattern is an invalid config: the controller keeps the last good one.
    let broken = CHANNELS.replace(
        "        allowBots: mentions\n",
        "        allowBots: mentions\n        mentionPatterns: [\"(?<=@)helper\"]\n",
    );
    up.write_by_rename("channels.yaml", &broken);
    let status = up.wait_for("the edit rejected", |s| !s["rejected"].is_null());
    assert!(
        status["rejected"]
            .to_string()
            .contains("invalid-mention-pattern"),
        "{status:#}"
    );
    assert!(
        reply(&inbound(
            &up,
            &message("crowd", None, "U00001", "l-3", "still served")
        ))
        .contains("still served")
    );
}

#[test]
fn route_explain_shows_the_gate() {
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    let route = |args: &[&str]| {
        let out = Command::new(bin())
            .args([
                "--config",
                quickstart.to_str().unwrap(),
                "route",
                "--channel",
                "telegram",
                "--explain",
            ])
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        // Only the gate: the tiers are route.rs's.
        text[text.find("\ngate\n").expect(&text)..].to_string()
    };
    let group = ["--peer", "group:-1001234567890"];
    insta::assert_snapshot!(
        "gate_not_mentioned",
        route(&[&group[..], &["--sender", "111111111"]].concat())
    );
    insta::assert_snapshot!(
        "gate_mentioned_by_name",
        route(
            &[
                &group[..],
                &["--sender", "111111111", "--text", "@Research hi"]
            ]
            .concat()
        )
    );
    insta::assert_snapshot!(
        "gate_mentioned_by_id",
        route(
            &[
                &group[..],
                &["--sender", "111111111", "--mention", "7000000001"]
            ]
            .concat()
        )
    );
    insta::assert_snapshot!(
        "gate_sender_not_allowed",
        route(&[&group[..], &["--sender", "222", "--mention", "7000000001"]].concat())
    );
    insta::assert_snapshot!(
        "gate_group_not_listed",
        route(&["--peer", "group:-100999", "--sender", "111111111"])
    );
    insta::assert_snapshot!(
        "gate_dm_stranger",
        route(&["--peer", "direct:222", "--sender", "222"])
    );
    insta::assert_snapshot!(
        "gate_bot",
        route(&[
            "--peer",
            "direct:111111111",
            "--sender",
            "111111111",
            "--bot"
        ])
    );
    // JSON: the same verdict.
    let out = Command::new(bin())
        .args([
            "--config",
            quickstart.to_str().unwrap(),
            "route",
            "--channel",
            "telegram",
            "--json",
            "--explain",
        ])
        .args(["--peer", "direct:222", "--sender", "222"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["gate"]["verdict"], "gated", "{doc:#}");
    assert_eq!(doc["gate"]["reason"], "dm-not-allowed");
    assert_eq!(doc["gate"]["unless"], "sender-paired");
}

#[test]
fn a_pairing_code_also_goes_to_the_reply_url() {
    let (url, received) = crate::common::one_request();
    let channels = format!(
        "channels:\n  slack:\n    accounts:\n      default:\n        webhookSecret: {{source: env, id: HOOK}}\n        replyUrl: \"{url}\"\n"
    );
    let up = start(&channels);
    let answer = inbound(&up, &message("default", None, "U-NEW", "r-1", "hello?"));
    assert_gated(&answer, "pairing-required", "dmPolicy");
    let code = answer.1["gated"]["pairingCode"]
        .as_str()
        .unwrap()
        .to_string();
    let (headers, raw) = received.recv_timeout(Duration::from_secs(30)).unwrap();
    // Signed like every reply: over the exact bytes sent.
    let signature = deepcli::sign(SECRET.as_bytes(), raw.as_bytes());
    assert!(
        headers.contains(&format!("x-deepcli-signature: {signature}")),
        "{headers}"
    );
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert!(
        body["reply"]["text"].as_str().unwrap().contains(&code),
        "{body:#}"
    );
    assert_eq!(body["messageId"], "r-1");
    assert_eq!(body["peer"], json!({"kind": "direct", "id": "U-NEW"}));
}
