//! Slack through the fake: two bot accounts (two Slack apps) in one workspace, each bound to
//! its own echo agent: a human mention, a thread reply, the round limit
//! and the close marker, a second channel — over Socket Mode and the Events API; signatures
//! and replays refused; a dropped WebSocket and a `disconnect` reconnected.

use serde_json::{Value, json};

use super::slack_fake::{App, Button, Fake, Server, Waits};
use super::{FAST, SPAWN, adapter, channel_log, deepcli, is_announce};
use crate::common::{Up, sdk_echo_agent};

/// Two echo agents: `alpha` and `beta`.
fn agents() -> String {
    let agent = sdk_echo_agent();
    format!(
        "agents:\n  list:\n    - id: main\n    - id: alpha\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n    - id: beta\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n",
        agent.display()
    )
}

const BINDINGS: &str = "bindings:\n  - agentId: alpha\n    match: {channel: slack, accountId: alpha}\n  - agentId: beta\n    match: {channel: slack, accountId: beta}\n";

/// channels.yaml: the two apps as accounts `alpha` and `beta` on the fake; `account` adds
/// keys to both accounts, `channel` to the channel.
fn channels(server: &Server, account: &str, channel: &str) -> String {
    let one = |id: &str, n: u32| {
        format!(
            "      {id}:\n        botToken: {{source: env, id: SLACK_BOT_{n}}}\n        appToken: {{source: env, id: SLACK_APP_{n}}}\n        apiBase: \"{}\"\n{account}",
            server.base()
        )
    };
    format!(
        "channels:\n  slack:\n    defaultAccount: alpha\n    groupPolicy: open\n{channel}    accounts:\n{}{}",
        one("alpha", 1),
        one("beta", 2)
    )
}

fn start(_server: &Server, channels: &str, apps: &[&App]) -> Up {
    let apps: Vec<App> = apps.iter().map(|a| (*a).clone()).collect();
    Up::start_config(&agents(), channels, BINDINGS, move |cmd| {
        for (n, app) in apps.iter().enumerate() {
            cmd.env(format!("SLACK_BOT_{}", n + 1), &app.bot_token)
                .env(format!("SLACK_APP_{}", n + 1), &app.app_token);
        }
        cmd.env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    })
}

fn both_connected(up: &Up) -> Value {
    up.wait_for("both Slack apps connected", |s| {
        ["alpha", "beta"]
            .iter()
            .all(|a| adapter(s, "slack", a)["state"] == "connected")
    })
}

fn text(v: &Value) -> String {
    v["text"].as_str().unwrap_or_default().to_string()
}

/// Every event the fake sent has been taken and handled: each app saw its count and the
/// inbox is empty.
fn settled(up: &Up, counts: &[(&str, u64)]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(s) = up.status()
            && counts
                .iter()
                .all(|(a, n)| adapter(&s, "slack", a)["events"].as_u64() == Some(*n))
            && inbox(up) == 0
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "events not handled: {counts:?}; the channel's log:\n{}",
            channel_log(up, "slack")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn inbox(up: &Up) -> i64 {
    let db = rusqlite::Connection::open_with_flags(
        up.state.join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row("SELECT count(*) FROM adapter_inbox", [], |r| r.get(0))
        .unwrap_or(-1)
}

/// Appendix B 1, 2 and 4 over Socket Mode: a human's mention is answered by the bot it
/// names only (once, though Slack sends `message` and `app_mention`), in a thread; a reply in
/// that thread naming the other bot is answered by that one only (`requireExplicitMention`);
/// a second channel is a conversation of its own. Every envelope is acknowledged.
#[test]
fn slack_mentions_threads_and_a_second_channel_over_socket_mode() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let up = start(
        &server,
        &channels(
            &server,
            "        replyToMode: first\n",
            "    requireExplicitMention: true\n",
        ),
        &[&alpha, &beta],
    );
    let status = both_connected(&up);
    let live = adapter(&status, "slack", "alpha");
    assert_eq!(live["identity"]["botUserId"], alpha.user_id, "{live:#}");
    assert_eq!(live["identity"]["teamId"], "T0TEAM");
    assert_eq!(live["mode"], "socket");

    // 1. A human mentions alpha in #main.
    let asked = fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!("<@{}> plan the release", alpha.user_id),
        None,
    );
    fake.wait("alpha's answer", |f| f.posted_by(&alpha).len() == 1);
    let answer = &fake.posted_by(&alpha)[0];
    assert!(
        text(answer).starts_with(&format!("echo: <@{}> plan the release", alpha.user_id)),
        "{answer:#}"
    );
    assert_eq!(answer["channel"], "C0MAIN");
    assert_eq!(
        answer["thread_ts"],
        asked.as_str(),
        "replyToMode first: a thread under the message"
    );

    // 2. In that thread the human asks beta.
    fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!("<@{}> review it", beta.user_id),
        Some(&asked),
    );
    fake.wait("beta's answer", |f| f.posted_by(&beta).len() == 1);
    let answer = &fake.posted_by(&beta)[0];
    assert_eq!(answer["thread_ts"], asked.as_str());
    assert!(text(answer).contains("review it"));

    // 4. A second channel: beta, asked there, starts a conversation of its own (turn 1).
    fake.human(
        "C0SECOND",
        "U0HUMAN",
        &format!("<@{}> hello", beta.user_id),
        None,
    );
    fake.wait("beta's answer in #second", |f| {
        f.posted_by(&beta).len() == 2
    });
    let second = &fake.posted_by(&beta)[1];
    assert_eq!(second["channel"], "C0SECOND");
    assert!(text(second).contains("(turn 1)"), "{second:#}");

    // Every message reaches both apps, and an app_mention the app it names (the echoes name
    // the bot they answer for): alpha 3 humans + 3 bot posts + 2 mentions, beta 3 + 3 + 4.
    settled(&up, &[("alpha", 8), ("beta", 10)]);
    assert_eq!(
        fake.posted_by(&alpha).len(),
        1,
        "alpha answered once (message + app_mention), not in beta's thread turn"
    );
    assert_eq!(fake.posted_by(&beta).len(), 2);
    // Acknowledged once recorded: the last acks may still be on their way.
    fake.wait("every envelope acknowledged", |f| f.acks().len() == 18);
    let log = channel_log(&up, "slack");
    assert!(log.contains("gated=not-mentioned"), "{log}");
    assert!(log.contains("gated=self "), "{log}");
}

/// Appendix B 3: two bots talking in a thread stop after `maxRounds` bot replies, and one
/// notice asks a human to step in; a human reply re-opens the discussion; a reply holding the
/// close marker ends it, and no bot answers after it.
#[test]
fn two_slack_bots_in_one_thread_stop_at_max_rounds_and_at_the_close_marker() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let up = start(
        &server,
        &channels(
            &server,
            "        replyToMode: all\n        allowBots: true\n",
            "    requireMention: false\n    groups:\n      C0DISC:\n        discussion: {maxRounds: 4, closeMarker: \"echo: STOP\"}\n",
        ),
        &[&alpha, &beta],
    );
    both_connected(&up);
    let thread = fake.human("C0DISC", "U0HUMAN", "let us discuss", None);
    fake.wait("the notice", |f| {
        f.posted()
            .iter()
            .any(|c| text(&c.body).starts_with("This discussion is paused"))
    });
    // 1 human + 4 rounds + 1 notice, each seen by both apps.
    settled(&up, &[("alpha", 6), ("beta", 6)]);
    let posted = fake.posted();
    let rounds: Vec<&Value> = posted
        .iter()
        .map(|c| &c.body)
        .filter(|b| text(b).starts_with("echo: "))
        .collect();
    assert_eq!(rounds.len(), 4, "{posted:#?}");
    assert!(rounds.iter().all(|b| b["thread_ts"] == thread.as_str()));
    let notices = posted
        .iter()
        .filter(|c| text(&c.body).starts_with("This discussion is paused"))
        .count();
    assert_eq!(notices, 1);
    let log = channel_log(&up, "slack");
    assert!(log.contains("discussion paused"), "{log}");
    assert!(log.contains("why=discussion-"), "{log}");
    // `sessions show` tells the thread's rounds and state, for every session in the channel.
    let listed = deepcli(&up, &["sessions", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let keys: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionKey"].as_str())
        .filter(|k| k.contains(":slack:") && k.contains("c0disc"))
        .collect();
    assert!(!keys.is_empty(), "{listed:#}");
    for key in keys {
        let shown = deepcli(&up, &["sessions", "show", key, "--json"]);
        assert!(shown.status.success(), "{shown:?}");
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(
            shown["discussions"],
            json!([{"threadId": thread, "rounds": 4, "state": "limit", "noticeSent": true}]),
            "{shown:#}"
        );
    }

    // A human re-opens it: four more rounds, one more notice.
    fake.human("C0DISC", "U0HUMAN", "go on", Some(&thread));
    settled(&up, &[("alpha", 12), ("beta", 12)]);
    assert_eq!(fake.posted().len(), 10, "{:#?}", fake.posted());

    // A reply with the close marker ends it at once: the other bot's reply is not posted.
    fake.human("C0DISC", "U0HUMAN", "STOP", Some(&thread));
    settled(&up, &[("alpha", 14), ("beta", 14)]);
    let after: Vec<String> = fake.posted()[10..].iter().map(|c| text(&c.body)).collect();
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].starts_with("echo: STOP"), "{after:?}");
    assert!(channel_log(&up, "slack").contains("by=close-marker"));
}

/// A dropped WebSocket and a `disconnect` request: the adapter opens a new connection and
/// events after it are delivered.
#[test]
fn a_dropped_slack_socket_reconnects() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let up = start(&server, &channels(&server, "", ""), &[&alpha, &beta]);
    both_connected(&up);
    let opens = |f: &Fake| {
        f.calls()
            .iter()
            .filter(|c| c.method == "apps.connections.open" && c.token == alpha.app_token)
            .count()
    };
    assert_eq!(opens(fake), 1);
    fake.drop_sockets(&alpha);
    fake.wait("a new socket after the drop", |f| {
        opens(f) == 2 && f.sockets(&alpha) == 1
    });
    fake.ask_reconnect(&alpha);
    fake.wait("a new socket after disconnect", |f| {
        opens(f) == 3 && f.sockets(&alpha) == 1
    });
    up.wait_for("alpha connected again", |s| {
        adapter(s, "slack", "alpha")["state"] == "connected"
            && adapter(s, "slack", "alpha")["connects"].as_u64() >= Some(3)
    });
    fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!("<@{}> still there?", alpha.user_id),
        None,
    );
    fake.wait("alpha's answer", |f| f.posted_by(&alpha).len() == 1);
    assert!(channel_log(&up, "slack").contains("Slack asked to reconnect (refresh_requested)"));
}

/// The Events API: url_verification answered; a bad signature, a stale timestamp and a
/// missing one refused; Slack's retry of an event (same event_id) answered once; acks sent
/// before delivery.
#[test]
fn slack_http_events_are_verified_and_deduplicated() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("signing");
    std::fs::write(&secret_file, "signing-secret-1\n").unwrap();
    let up = start(
        &server,
        &channels(
            &server,
            &format!(
                "        mode: http\n        signingSecret: {{source: file, path: {}}}\n",
                secret_file.display()
            ),
            "    dmPolicy: open\n    allowFrom: [\"*\"]\n",
        ),
        &[&alpha, &beta],
    );
    both_connected(&up);
    assert!(
        fake.calls()
            .iter()
            .all(|c| c.method != "apps.connections.open"),
        "no socket in http mode"
    );
    let url = |account: &str| format!("http://{}/v1/slack/{account}/events", up.addr);
    fake.set_http("alpha", Some((url("alpha"), "signing-secret-1".into())));
    fake.set_http("beta", Some((url("beta"), "signing-secret-1".into())));
    let now = jiff::Timestamp::now().as_second();
    let challenge =
        json!({"type": "url_verification", "challenge": "c-123", "token": "x"}).to_string();
    assert_eq!(
        fake.post_signed(&url("alpha"), "signing-secret-1", now, &challenge, 0)
            .0,
        200
    );
    assert_eq!(
        fake.post_signed(&url("alpha"), "wrong-secret", now, &challenge, 0)
            .0,
        401
    );
    assert_eq!(
        fake.post_signed(&url("alpha"), "signing-secret-1", now - 301, &challenge, 0)
            .0,
        401
    );
    assert_eq!(fake.post_raw(&url("alpha"), &[], &challenge).0, 401);
    assert_eq!(
        fake.post_signed(&url("nobody"), "signing-secret-1", now, &challenge, 0)
            .0,
        404
    );

    let alpha_app = App {
        http: Some((url("alpha"), "signing-secret-1".into())),
        ..alpha.clone()
    };
    let event = json!({"type": "message", "channel": "D0ALPHA", "channel_type": "im", "user": "U0HUMAN",
        "text": "over http", "ts": "1700000999.000100", "team": "T0TEAM"});
    // chat.postMessage answers 429 once: Retry-After is waited out.
    fake.rate_limit_next_posts(1);
    let payload = fake.deliver(&alpha_app, event);
    fake.send_payload(&alpha_app, &payload, 1);
    fake.wait("alpha's answer", |f| f.posted_by(&alpha).len() == 2);
    assert!(
        channel_log(&up, "slack").contains("rate-limited method=chat.postMessage retry_after_s=1")
    );
    // The event, Slack's retry of it, and alpha's own reply.
    settled(&up, &[("alpha", 3), ("beta", 1)]);
    assert_eq!(fake.posted_by(&alpha).len(), 2, "the 429 and the reply");
    assert!(
        fake.posts().iter().all(|(_, status, _)| *status == 200),
        "{:?}",
        fake.posts()
    );
    let log = channel_log(&up, "slack");
    assert!(log.contains("why=stale X-Slack-Request-Timestamp"), "{log}");
    assert!(log.contains("why=wrong X-Slack-Signature"), "{log}");
    let out = deepcli(&up, &["channels", "status", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["accounts"][0]["live"]["adapter"]["mode"], "http",
        "{doc:#}"
    );
}

/// `channels resolve` pages through the workspace directory (two entries a page in the fake)
/// and says per name found, not found, or ambiguous with the candidates; the CLI and the
/// JSON-RPC method answer alike.
#[test]
fn slack_names_resolve_through_the_directory() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    fake.directory(
        vec![
            json!({"id": "U01", "name": "alice", "real_name": "Alice A", "profile": {"display_name": "alice"}}),
            json!({"id": "U02", "name": "bob", "real_name": "Bob", "profile": {"display_name": "bobby"}}),
            json!({"id": "U03", "name": "sam1", "real_name": "Sam", "profile": {"display_name": "sam"}}),
            json!({"id": "U04", "name": "sam2", "real_name": "Sam", "profile": {"display_name": "sam"}}),
            json!({"id": "U05", "name": "gone", "deleted": true, "profile": {}}),
        ],
        vec![
            json!({"id": "C01", "name": "general"}),
            json!({"id": "C02", "name": "eng"}),
            json!({"id": "C03", "name": "random"}),
        ],
    );
    let up = start(&server, &channels(&server, "", ""), &[&alpha, &beta]);
    both_connected(&up);
    let out = deepcli(
        &up,
        &[
            "channels",
            "resolve",
            "@alice",
            "@bobby",
            "#eng",
            "@sam",
            "@gone",
            "#nope",
            "--channel",
            "slack",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a name not resolved fails the command"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["names"],
        json!([
            {"name": "@alice", "kind": "user", "status": "found", "id": "U01"},
            {"name": "@bobby", "kind": "user", "status": "found", "id": "U02"},
            {"name": "#eng", "kind": "channel", "status": "found", "id": "C02"},
            {"name": "@sam", "kind": "user", "status": "ambiguous", "candidates": [{"id": "U03", "name": "Sam"}, {"id": "U04", "name": "Sam"}]},
            {"name": "@gone", "kind": "user", "status": "not-found"},
            {"name": "#nope", "kind": "channel", "status": "not-found"},
        ]),
        "{doc:#}"
    );
    let pages = fake
        .calls()
        .iter()
        .filter(|c| c.method == "users.list")
        .count();
    assert_eq!(pages, 3, "five users, two a page");
    let out = deepcli(
        &up,
        &["channels", "resolve", "#general", "--channel", "slack"],
    );
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "#general\tC01\n");
    // The same through the controller's JSON-RPC.
    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let answer: Value = serde_json::from_str(
        &agent
            .post(format!("http://{}/rpc", up.addr))
            .header("authorization", &format!("Bearer {}", token.trim()))
            .content_type("application/json")
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": "_mustang.agent/channels/resolve", "params": {"channel": "slack", "names": ["#general"]}}).to_string())
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(answer["result"]["names"][0]["id"], "C01", "{answer:#}");
    assert_eq!(answer["result"]["account"], "alpha");
}

/// Bots repeating each other stall a discussion: after `stallRounds` replies that repeat the
/// one before, the thread is paused like at `maxRounds`, with one notice.
#[test]
fn two_slack_bots_repeating_each_other_stall_the_discussion() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let up = start(
        &server,
        &channels(
            &server,
            "        replyToMode: all\n        allowBots: true\n        discussion: {maxRounds: 10, stallRounds: 1}\n",
            "    requireMention: false\n",
        ),
        &[&alpha, &beta],
    );
    both_connected(&up);
    // Both agents answer exactly "same" (the echo agent's scripted reply).
    fake.human("C0STALL", "U0HUMAN", "reply: same", None);
    fake.wait("the notice", |f| {
        f.posted()
            .iter()
            .any(|c| text(&c.body).contains("repeated themselves"))
    });
    // 1 human + 2 replies + 1 notice, each seen by both apps.
    settled(&up, &[("alpha", 4), ("beta", 4)]);
    let texts: Vec<String> = fake.posted().iter().map(|c| text(&c.body)).collect();
    assert_eq!(
        texts.iter().filter(|t| *t == "same").count(),
        2,
        "{texts:?}"
    );
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(channel_log(&up, "slack").contains("why=stall"));
}

/// A subagent spawned from a Slack thread finishes: the parent's answer to its announce is
/// posted by the outbox in that thread, by the bot that was asked (conversations.md).
#[test]
fn a_subagents_announce_reaches_the_slack_thread_it_was_spawned_from() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let up = start(&server, &channels(&server, "", ""), &[&alpha, &beta]);
    both_connected(&up);
    let root = fake.human("C0MAIN", "U0HUMAN", "a thread about the release", None);
    fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!("<@{}> split the work\n{SPAWN}", alpha.user_id),
        Some(&root),
    );
    fake.wait("the announce in the thread", |f| {
        f.posted_by(&alpha).iter().any(|p| is_announce(&text(p)))
    });
    let announce = fake
        .posted_by(&alpha)
        .into_iter()
        .find(|p| is_announce(&text(p)))
        .unwrap();
    assert_eq!(announce["channel"], "C0MAIN", "{announce:#}");
    assert_eq!(announce["thread_ts"], root.as_str(), "{announce:#}");
    assert!(
        fake.posted_by(&beta).iter().all(|p| !is_announce(&text(p))),
        "posted by the bot that was asked only"
    );
    let log = channel_log(&up, "slack");
    assert!(log.contains("outbound cause=announce"), "{log}");
    assert!(log.contains("carrier=slack"), "{log}");
}

/// An approval asked in a Slack thread (conversations.md, "Approvals in the chat, with
/// buttons"), over Socket Mode or the HTTP interactivity endpoint: the prompt is posted in the
/// thread with Approve once / Always / Deny buttons; a click by a member who is no approver is
/// answered with a message only they see and decides nothing; the approver's click lets the
/// agent's tool call run, and the prompt's message is replaced by its outcome, buttons gone.
fn approval_buttons(http: bool) {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let agent = sdk_echo_agent();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: alpha\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n      permissions: {{route: origin, timeoutSeconds: 60, approvers: [\"slack:U0BOSS\"]}}\n    - id: beta\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n",
        agent.display()
    );
    let account = if http {
        "        mode: http\n        signingSecret: {source: env, id: SLACK_SIGNING}\n"
    } else {
        ""
    };
    let apps = [alpha.clone(), beta.clone()];
    let up = Up::start_config(
        &agents,
        &channels(&server, account, ""),
        BINDINGS,
        move |cmd| {
            for (n, app) in apps.iter().enumerate() {
                cmd.env(format!("SLACK_BOT_{}", n + 1), &app.bot_token)
                    .env(format!("SLACK_APP_{}", n + 1), &app.app_token);
            }
            cmd.env("SLACK_SIGNING", "signing-secret-1")
                .env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
        },
    );
    both_connected(&up);
    let alpha = if http {
        let url = |account: &str| {
            (
                format!("http://{}/v1/slack/{account}/events", up.addr),
                "signing-secret-1".to_string(),
            )
        };
        fake.set_http("alpha", Some(url("alpha")));
        fake.set_http("beta", Some(url("beta")));
        App {
            http: Some(url("alpha")),
            ..alpha
        }
    } else {
        alpha
    };

    let root = fake.human("C0MAIN", "U0HUMAN", "a thread about the cache", None);
    fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!(
            "<@{}> clean up\npermission delete /tmp/cache",
            alpha.user_id
        ),
        Some(&root),
    );
    fake.wait("the approval's prompt", |f| {
        f.posted_by(&alpha)
            .iter()
            .any(|p| p.get("blocks").is_some())
    });
    let prompt = fake
        .posted_by(&alpha)
        .into_iter()
        .find(|p| p.get("blocks").is_some())
        .unwrap();
    assert_eq!(prompt["channel"], "C0MAIN");
    assert_eq!(prompt["thread_ts"], root.as_str(), "in the asking thread");
    let buttons = prompt["blocks"][1]["elements"].as_array().unwrap().clone();
    let actions: Vec<&str> = buttons
        .iter()
        .map(|b| b["action_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["deepcli_approve", "deepcli_always", "deepcli_deny"]
    );
    let id = buttons[0]["value"].as_str().unwrap().to_string();
    let ts = prompt_ts(&up, &id);
    let approve = Button {
        channel: "C0MAIN",
        ts: &ts,
        thread_ts: Some(&root),
        action_id: "deepcli_approve",
        value: &id,
    };

    // A member who is no approver: a message only they see, nothing decided.
    fake.click(&alpha, "U0HUMAN", &approve);
    fake.wait("the private refusal", |f| {
        !f.calls_by(&alpha, "chat.postEphemeral").is_empty()
    });
    let refusal = &fake.calls_by(&alpha, "chat.postEphemeral")[0];
    assert_eq!(refusal["user"], "U0HUMAN");
    assert!(
        refusal["text"]
            .as_str()
            .unwrap()
            .contains("not an approver"),
        "{refusal}"
    );
    let log = channel_log(&up, "slack");
    assert!(
        log.contains(&format!("click-refused approval={id} by=slack:U0HUMAN")),
        "{log}"
    );
    assert!(
        fake.calls_by(&alpha, "chat.update").is_empty(),
        "nothing decided"
    );

    // The approver decides: the tool call runs, the prompt becomes its outcome.
    fake.click(&alpha, "U0BOSS", &approve);
    fake.wait("the agent's answer", |f| {
        f.posted_by(&alpha)
            .iter()
            .any(|p| text(p).starts_with("permission: allow"))
    });
    fake.wait("the prompt updated", |f| {
        !f.calls_by(&alpha, "chat.update").is_empty()
    });
    let update = &fake.calls_by(&alpha, "chat.update")[0];
    assert_eq!(update["ts"], ts.as_str());
    assert_eq!(update["channel"], "C0MAIN");
    assert!(
        text(update).contains("approved by slack:U0BOSS"),
        "{update}"
    );
    let blocks = update["blocks"].as_array().unwrap();
    assert!(
        blocks.iter().all(|b| b["type"] != "actions"),
        "the buttons are gone: {update}"
    );
}

/// The ts the outbox recorded for approval `id`'s prompt (Slack's answer to its post).
fn prompt_ts(up: &Up, id: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
        let ts: Option<String> = db
            .query_row(
                "SELECT posted_id FROM outbox WHERE cause = 'approval' AND cause_id = ?1 AND state = 'posted'",
                [id],
                |r| r.get(0),
            )
            .ok();
        if let Some(ts) = ts {
            return ts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the prompt never posted"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn an_approval_in_a_slack_thread_is_decided_with_its_buttons_over_socket_mode() {
    approval_buttons(false);
}

#[test]
fn an_approval_in_a_slack_thread_is_decided_with_its_buttons_over_http() {
    approval_buttons(true);
}

/// What each agent is told (conversations.md, "What the agent is told"): a human and two bots
/// in one Slack thread, an agent's prompt begins with who wrote the message — name or id,
/// person or bot — and where. The echo agent's `raw` shows the prompt as deepcli sent it: the
/// human asks beta, then asks alpha to ask beta (bots are let in here).
#[test]
fn each_agent_is_told_who_wrote_the_message_it_answers() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let up = start(
        &server,
        &channels(
            &server,
            "",
            "    requireExplicitMention: true\n    groups:\n      C0MAIN: {allowBots: true}\n",
        ),
        &[&alpha, &beta],
    );
    both_connected(&up);
    let root = fake.human("C0MAIN", "U0HUMAN", "the release", None);
    let raws = |f: &Fake| -> Vec<String> {
        f.posted_by(&beta)
            .iter()
            .map(text)
            .filter(|t| t.starts_with("raw: "))
            .collect()
    };
    fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!("<@{}> what do you see?\nraw", beta.user_id),
        Some(&root),
    );
    fake.wait("beta's prompt from the human", |f| raws(f).len() == 1);
    fake.human(
        "C0MAIN",
        "U0HUMAN",
        &format!(
            "<@{}> ask beta\nreply: <@{}> and now?\\nraw",
            alpha.user_id, beta.user_id
        ),
        Some(&root),
    );
    fake.wait("beta's prompt from alpha", |f| raws(f).len() >= 2);
    let seen = raws(fake)[..2].join("\n\n") + "\n";
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{10}\.\d{6}", "[TS]");
    settings.bind(|| insta::assert_snapshot!("slack_prompts_name_the_sender", seen));
    // The transcripts keep the messages as they came, without the line.
    let count = |sql: &str| crate::common::count(&up.state, sql);
    assert!(count("SELECT count(*) FROM transcript WHERE provenance = 'inbound'") >= 3);
    assert_eq!(
        count("SELECT count(*) FROM transcript WHERE text LIKE '[deepcli: message from%'"),
        0
    );
}

/// Seed 002's scenario in one Slack thread (tasks.md): a person asks Bot A for a change with
/// an acceptance test; A gives Bot B the task; B asks a question (the task waits, the question
/// is in the thread); A answers; B works in its own workspace and hands in the change and its
/// test log; A checks the handed-in copy itself, in its own workspace, and records its verdict;
/// the person rejects once with a reason (back to B), then accepts. Every state, every message
/// the thread got and who posted it, the artifacts' hashes, A's workspace untouched by B, and
/// the audit's story are checked. B's turns are driven as the operator (`sessions send` into
/// the task's session); A's by the person's messages in the thread.
#[test]
fn seed_002_a_task_delegated_checked_and_decided_in_one_slack_thread() {
    use sha2::Digest;
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1, None);
    let beta = fake.install("beta", 2, None);
    let agent = sdk_echo_agent();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: alpha\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n      permissions: {{approvers: [\"slack:U0BOSS\"]}}\n    - id: beta\n      runtime: {{kind: acp, command: [node, \"{0}\"]}}\n",
        agent.display()
    );
    let apps = [alpha.clone(), beta.clone()];
    let up = Up::start_config(&agents, &channels(&server, "", ""), BINDINGS, move |cmd| {
        for (n, app) in apps.iter().enumerate() {
            cmd.env(format!("SLACK_BOT_{}", n + 1), &app.bot_token)
                .env(format!("SLACK_APP_{}", n + 1), &app.app_token);
        }
        cmd.env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    });
    both_connected(&up);
    let told = |f: &Fake| -> Vec<String> {
        f.posted_by(&alpha)
            .iter()
            .map(text)
            .filter(|t| t.starts_with("[task "))
            .collect()
    };
    let wait_told = |n: usize| {
        fake.wait(&format!("{n} task messages in the thread"), |f| {
            told(f).len() >= n
        })
    };
    let task_state = |id: &str| -> String {
        let out = deepcli(&up, &["tasks", "show", id, "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["state"].as_str().unwrap_or_default().to_string()
    };

    // The person asks A; A gives B the task.
    let root = fake.human("C0MAIN", "U0BOSS", "the --quiet flag", None);
    fake.human(
        "C0MAIN",
        "U0BOSS",
        &format!(
            "<@{}> rename --quiet to --silent; done when the tests pass\nmcp tasks_create {}",
            alpha.user_id,
            json!({"agentId": "beta", "title": "rename --quiet to --silent", "acceptance": "test.sh passes"})
        ),
        Some(&root),
    );
    wait_told(1);
    let first = told(fake)[0].clone();
    let id = first
        .strip_prefix("[task ")
        .and_then(|r| r.split(']').next())
        .unwrap()
        .to_string();
    let task_key = format!("agent:beta:task:{id}");
    assert_eq!(task_state(&id), "working");
    let as_beta = |tool: &str, args: Value| -> Value {
        let out = deepcli(
            &up,
            &["sessions", "send", &task_key, &format!("mcp {tool} {args}")],
        );
        let reply = String::from_utf8_lossy(&out.stdout).trim().to_string();
        serde_json::from_str(reply.strip_prefix("mcp: ").unwrap_or("null"))
            .unwrap_or(json!({"failed": reply}))
    };

    // B asks instead of guessing; the thread sees the question.
    let asked = as_beta(
        "tasks_update",
        json!({"taskId": id, "action": "ask", "text": "keep --quiet as an alias?"}),
    );
    assert_eq!(asked["state"], "awaiting_input", "{asked}");
    wait_told(2);
    // A answers, asked to by the person in the thread.
    fake.human(
        "C0MAIN",
        "U0BOSS",
        &format!(
            "<@{}> tell beta: no alias\nmcp tasks_update {}",
            alpha.user_id,
            json!({"taskId": id, "action": "answer", "text": "no alias"})
        ),
        Some(&root),
    );
    wait_told(3);
    assert_eq!(task_state(&id), "working");

    // B works in its own workspace and hands in the change and the test log.
    let ws_b = up.state.join("workspaces/beta");
    let ws_a = up.state.join("workspaces/alpha");
    let before_a: Vec<String> = walk(&ws_a);
    std::fs::write(ws_b.join("change.diff"), "-  --quiet\n+  --silent\n").unwrap();
    std::fs::write(
        ws_b.join("test.sh"),
        "#!/bin/sh\ngrep -q -- --silent change.diff && echo 'ok 1 renamed'\n",
    )
    .unwrap();
    std::fs::write(ws_b.join("test.log"), "ok 1 renamed\n").unwrap();
    let submit = |text: &str| {
        as_beta(
            "tasks_update",
            json!({"taskId": id, "action": "submit", "text": text, "artifacts": ["change.diff", "test.sh", "test.log"]}),
        )
    };
    let submitted = submit("renamed; test.sh passes");
    assert_eq!(submitted["state"], "submitted", "{submitted}");
    wait_told(7);
    let digest = |bytes: &[u8]| hex::encode(sha2::Sha256::digest(bytes));
    let handed = &submitted["artifacts"];
    assert_eq!(
        handed[0]["sha256"],
        digest(b"-  --quiet\n+  --silent\n").as_str()
    );
    assert_eq!(handed[2]["sha256"], digest(b"ok 1 renamed\n").as_str());

    // A checks for itself, in its own workspace, on the copy it was given, and says so.
    let copy = format!(".deepcli/tasks/{id}");
    fake.human(
        "C0MAIN",
        "U0BOSS",
        &format!(
            "<@{}> check it yourself\nexec cd {copy} && sh test.sh",
            alpha.user_id
        ),
        Some(&root),
    );
    fake.wait("A's own check", |f| {
        f.posted_by(&alpha)
            .iter()
            .any(|p| text(p).starts_with("exec: 0\nok 1 renamed"))
    });
    fake.human(
        "C0MAIN",
        "U0BOSS",
        &format!(
            "<@{}> record it\nmcp tasks_review {}",
            alpha.user_id,
            json!({"taskId": id, "passed": true, "notes": "ran test.sh on the handed-in copy: ok 1 renamed"})
        ),
        Some(&root),
    );
    fake.wait("pending acceptance", |_| {
        task_state(&id) == "pending_acceptance"
    });

    // The person rejects once with a reason: back to B, who fixes it; then accepts.
    fake.human(
        "C0MAIN",
        "U0BOSS",
        &format!("/reject {id} the docs still say --quiet"),
        Some(&root),
    );
    fake.wait("back to working", |_| task_state(&id) == "working");
    std::fs::write(
        ws_b.join("change.diff"),
        "-  --quiet\n+  --silent\n- docs: --quiet\n+ docs: --silent\n",
    )
    .unwrap();
    assert_eq!(submit("docs too")["state"], "submitted");
    fake.human(
        "C0MAIN",
        "U0BOSS",
        &format!(
            "<@{}> check again\nmcp tasks_review {}",
            alpha.user_id,
            json!({"taskId": id, "passed": true, "notes": "docs renamed too"})
        ),
        Some(&root),
    );
    fake.wait("pending acceptance again", |_| {
        task_state(&id) == "pending_acceptance"
    });
    // The verdict's message has Accept and Reject buttons carrying the task's id.
    fake.wait("the verdict's buttons", |f| {
        f.posted_by(&alpha)
            .iter()
            .filter(|p| p.get("blocks").is_some())
            .count()
            >= 2
    });
    let verdict = fake
        .posted_by(&alpha)
        .into_iter()
        .rev()
        .find(|p| p.get("blocks").is_some())
        .unwrap();
    let buttons = verdict["blocks"][1]["elements"].as_array().unwrap().clone();
    let actions: Vec<(&str, &str)> = buttons
        .iter()
        .map(|b| {
            (
                b["action_id"].as_str().unwrap(),
                b["value"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("deepcli_accept", id.as_str()),
            ("deepcli_reject", id.as_str())
        ]
    );
    let ts = {
        let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
        db.query_row(
            "SELECT posted_id FROM outbox WHERE cause = 'task-verdict' AND state = 'posted' ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
    };
    let button = |action_id: &'static str| Button {
        channel: "C0MAIN",
        ts: &ts,
        thread_ts: Some(&root),
        action_id,
        value: &id,
    };
    let ephemerals = |f: &Fake| f.calls_by(&alpha, "chat.postEphemeral").len();
    // Reject asks for the reason; a member who is no approver decides nothing.
    fake.click(&alpha, "U0BOSS", &button("deepcli_reject"));
    fake.wait("how to reject", |f| ephemerals(f) == 1);
    let how = &fake.calls_by(&alpha, "chat.postEphemeral")[0];
    assert!(
        text(how).contains(&format!("/reject {id} <reason>")),
        "{how}"
    );
    fake.click(&alpha, "U0HUMAN", &button("deepcli_accept"));
    fake.wait("the private refusal", |f| ephemerals(f) == 2);
    assert_eq!(task_state(&id), "pending_acceptance");
    fake.click(&alpha, "U0BOSS", &button("deepcli_accept"));
    fake.wait("accepted", |_| task_state(&id) == "accepted");
    // The verdict's message now says what was decided, its buttons gone.
    fake.wait("the verdict's message updated", |f| {
        f.calls_by(&alpha, "chat.update")
            .iter()
            .any(|u| u["ts"] == ts.as_str() && text(u).contains("accepted by slack:U0BOSS"))
    });
    let update = fake
        .calls_by(&alpha, "chat.update")
        .into_iter()
        .find(|u| u["ts"] == ts.as_str())
        .unwrap();
    assert!(
        update["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["type"] != "actions"),
        "the buttons are gone: {update}"
    );
    // The first verdict's message said the rejection, its buttons gone too.
    assert!(
        fake.calls_by(&alpha, "chat.update")
            .iter()
            .any(|u| text(u).contains("rejected by slack:U0BOSS: the docs still say --quiet")),
        "{:#?}",
        fake.calls_by(&alpha, "chat.update")
    );

    // The thread heard every move, in order, from A's bot, in the thread.
    fake.wait("the last move told", |f| {
        told(f)
            .iter()
            .any(|t| t.ends_with("accepted by slack:U0BOSS"))
    });
    let posts: Vec<Value> = fake
        .posted_by(&alpha)
        .into_iter()
        .filter(|p| text(p).starts_with("[task "))
        .collect();
    assert!(
        posts
            .iter()
            .all(|p| p["thread_ts"] == root.as_str() && p["channel"] == "C0MAIN"),
        "{posts:#?}"
    );
    let said: Vec<String> = posts
        .iter()
        .map(|p| text(p).replacen(&format!("[task {id}] "), "", 1))
        .map(|t| t.split(" (").next().unwrap().to_string())
        .collect();
    let expected = [
        "alpha gave beta a task: rename --quiet to --silent. Accepted when: test.sh passes",
        "beta asks: keep --quiet as an alias?",
        "alpha answered: no alias",
        "beta handed in change.diff",
        "beta handed in test.sh",
        "beta handed in test.log",
        "beta submitted its result: renamed; test.sh passes",
        "alpha checked the result: passes",
        "rejected by slack:U0BOSS: the docs still say --quiet; back to beta",
        "beta handed in change.diff",
        "beta handed in test.sh",
        "beta handed in test.log",
        "beta submitted its result: docs too",
        "alpha checked the result: passes",
        "accepted by slack:U0BOSS",
    ];
    assert_eq!(said, expected);
    assert!(
        fake.posted_by(&beta)
            .iter()
            .all(|p| !text(p).starts_with("[task "))
    );

    // B never wrote into A's workspace: A's workspace changed only by what deepcli placed
    // there, read-only.
    let after_a = walk(&ws_a);
    let new: Vec<&String> = after_a.iter().filter(|p| !before_a.contains(p)).collect();
    assert_eq!(
        new,
        [
            &format!("{copy}/change.diff"),
            &format!("{copy}/test.log"),
            &format!("{copy}/test.sh"),
        ],
        "{after_a:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    let placed = ws_a.join(format!("{copy}/change.diff"));
    assert_eq!(
        placed.metadata().unwrap().permissions().mode() & 0o777,
        0o444
    );
    assert_eq!(
        digest(&std::fs::read(&placed).unwrap()),
        digest(b"-  --quiet\n+  --silent\n- docs: --quiet\n+ docs: --silent\n")
    );

    // The audit tells the story, every move with who made it.
    let story = String::from_utf8(deepcli(&up, &["audit", "--task", &id]).stdout).unwrap();
    for part in [
        "created by agent:alpha:slack:",
        "asked by agent:beta via mcp: working → awaiting_input",
        "answered by agent:alpha via mcp: awaiting_input → working",
        "artifact by agent:beta via mcp: working (test.log 13 bytes, sha256 ",
        "reviewed by agent:alpha via mcp: in_review → pending_acceptance (passed: true)",
        "rejected by slack:U0BOSS via room: pending_acceptance → working",
        "accepted by slack:U0BOSS via room: pending_acceptance → accepted",
    ] {
        assert!(story.contains(part), "{part:?} not in:\n{story}");
    }
}

/// The files under `dir`, relative, sorted.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}
