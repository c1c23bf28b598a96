//! Discord through the fake REST API and Gateway: a guild message routed by guild and roles and
//! answered with a reference, in 2,000-character pieces; a thread answered in the thread with
//! its parent's binding; DM pairing; a dropped connection resumed with its sequence, op 7, an
//! invalid session identified anew; rate limits per bucket and the global one waited out;
//! approval buttons clicked by an approver and by someone else; two bots in one thread held to
//! `maxRounds`; names resolved, login, logout and the probe.

use std::time::Duration;

use serde_json::{Value, json};

use super::discord_fake::{
    ADMIN_ROLE, Bot, Fake, GENERAL, GUILD, MEMBER_ROLE, OTHER, Server, Waits,
};
use super::{FAST, adapter, channel_log, deepcli};
use crate::common::{Up, sdk_echo_agent};

/// agents.yaml: `main` and one echo agent per id, each with its extra lines.
fn agents(list: &[(&str, &str)]) -> String {
    let agent = sdk_echo_agent();
    let mut out = "agents:\n  list:\n    - id: main\n".to_string();
    for (id, extra) in list {
        out += &format!(
            "    - id: {id}\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n{extra}",
            agent.display()
        );
    }
    out
}

/// channels.yaml: one account per bot on the fake (the n-th's token in `DISCORD_TOKEN_<n>`);
/// `channel` adds keys to the channel, `account` to every account.
fn channels(server: &Server, accounts: &[&str], channel: &str, account: &str) -> String {
    let mut out = format!("channels:\n  discord:\n{channel}    accounts:\n");
    for (n, id) in accounts.iter().enumerate() {
        out += &format!(
            "      {id}:\n        token: {{source: env, id: DISCORD_TOKEN_{}}}\n        apiBase: \"{}\"\n{account}",
            n + 1,
            server.base()
        );
    }
    out
}

/// The guild listed and served without a mention.
fn open_guild() -> String {
    format!("    guilds:\n      \"{GUILD}\": {{requireMention: false}}\n")
}

fn start(agents: &str, channels: &str, bindings: &str, bots: &[&Bot]) -> Up {
    let tokens: Vec<String> = bots.iter().map(|b| b.token.clone()).collect();
    Up::start_config(agents, channels, bindings, move |cmd| {
        for (n, token) in tokens.iter().enumerate() {
            cmd.env(format!("DISCORD_TOKEN_{}", n + 1), token);
        }
        cmd.env("DEEPCLI_FAILPOINT_ADAPTER", FAST);
    })
}

fn connected(up: &Up, accounts: &[&str]) -> Value {
    up.wait_for("the Discord adapters connected", |s| {
        accounts
            .iter()
            .all(|a| adapter(s, "discord", a)["state"] == "connected")
    })
}

fn content(v: &Value) -> String {
    v["content"].as_str().unwrap_or_default().to_string()
}

fn session_keys(up: &Up) -> Vec<String> {
    let out = deepcli(up, &["sessions", "list", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionKey"].as_str().map(str::to_string))
        .collect()
}

/// A guild message from a member with a role is routed by the guild+roles binding, one from a
/// member without it by the guild's; each answered in the channel, the first piece referencing
/// the message, a long answer cut at 2,000 characters. The Gateway's URL is the one
/// `GET /gateway/bot` named, and IDENTIFY asks for guild members (a binding uses roles).
#[test]
fn a_discord_guild_message_is_routed_by_guild_and_roles_and_answered_with_a_reference() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    fake.give_roles("alice", &[ADMIN_ROLE]);
    fake.give_roles("bob", &[MEMBER_ROLE]);
    let bindings = format!(
        "bindings:\n  - agentId: admins\n    match: {{channel: discord, guildId: \"{GUILD}\", roles: [\"{ADMIN_ROLE}\"]}}\n  - agentId: members\n    match: {{channel: discord, guildId: \"{GUILD}\"}}\n"
    );
    let up = start(
        &agents(&[("admins", ""), ("members", "")]),
        &channels(&server, &["default"], &open_guild(), ""),
        &bindings,
        &[&bot],
    );
    let status = connected(&up, &["default"]);
    let live = adapter(&status, "discord", "default");
    assert_eq!(
        live["identity"]["botUserId"],
        bot.user_id.as_str(),
        "{live:#}"
    );
    assert_eq!(live["mode"], "gateway");
    assert_eq!(fake.calls_to("GET", "/gateway/bot").len(), 1);
    let identify = &fake.sent(2)[0];
    assert_eq!(identify.path, "/gateway/", "the URL GET /gateway/bot named");
    assert_eq!(identify.frame["d"]["token"], bot.token.as_str());
    assert_eq!(
        identify.frame["d"]["intents"],
        1 | 2 | 512 | 4096 | 32768,
        "guilds, members, guild and direct messages, message content"
    );

    let alice = fake.human("alice", GENERAL, "hello from an admin", json!({}));
    fake.wait("the answer to alice", |f| f.posted_by(&bot).len() == 1);
    let (channel, body) = &fake.posted_by(&bot)[0];
    assert_eq!(channel, GENERAL);
    assert!(content(body).starts_with("echo: "), "{body}");
    assert!(content(body).contains("hello from an admin"), "{body}");
    assert_eq!(body["message_reference"]["message_id"], alice["id"]);

    let long = format!("long {}", "word ".repeat(900));
    let bob = fake.human("bob", GENERAL, &long, json!({}));
    fake.wait("bob's answer in pieces", |f| f.posted_by(&bot).len() == 4);
    let pieces = &fake.posted_by(&bot)[1..];
    for (i, (channel, body)) in pieces.iter().enumerate() {
        assert_eq!(channel, GENERAL);
        assert!(content(body).chars().count() <= 2000, "{body}");
        assert_eq!(body.get("message_reference").is_some(), i == 0, "{body}");
    }
    assert_eq!(pieces[0].1["message_reference"]["message_id"], bob["id"]);
    let keys = session_keys(&up);
    assert!(
        keys.iter()
            .any(|k| k.starts_with("agent:admins:discord:channel:")),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with("agent:members:discord:channel:")),
        "{keys:?}"
    );
    // An edit is not handed in: logged, never answered.
    let mut edited = alice.clone();
    edited["content"] = "hello from an admin, edited".into();
    fake.dispatch(&bot, "MESSAGE_UPDATE", edited);
    let log = |up: &Up| channel_log(up, "discord");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !log(&up).contains("ignored dispatch=MESSAGE_UPDATE") {
        assert!(std::time::Instant::now() < deadline, "{}", log(&up));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(log(&up).contains("connected mode=gateway"));
    assert_eq!(fake.posted_by(&bot).len(), 4, "the edit is not answered");
}

/// A message in a thread is answered in the thread (its own channel), by the agent bound to the
/// thread's parent channel; a message in another channel goes by that channel's binding.
#[test]
fn a_discord_thread_is_answered_in_the_thread_with_its_parents_binding() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    let bindings = format!(
        "bindings:\n  - agentId: planners\n    match: {{channel: discord, peer: {{kind: channel, id: \"{GENERAL}\"}}}}\n  - agentId: others\n    match: {{channel: discord, peer: {{kind: channel, id: \"{OTHER}\"}}}}\n"
    );
    let up = start(
        &agents(&[("planners", ""), ("others", "")]),
        &channels(&server, &["default"], &open_guild(), ""),
        &bindings,
        &[&bot],
    );
    connected(&up, &["default"]);
    let thread = fake.thread(GENERAL, "plans");
    let said = fake.human("alice", &thread, "in the thread", json!({}));
    fake.wait("the answer in the thread", |f| f.posted_by(&bot).len() == 1);
    let (channel, body) = &fake.posted_by(&bot)[0];
    assert_eq!(channel, &thread);
    assert!(content(body).contains("in the thread"), "{body}");
    assert_eq!(body["message_reference"]["message_id"], said["id"]);
    fake.human("alice", OTHER, "elsewhere", json!({}));
    fake.wait("the answer elsewhere", |f| f.posted_by(&bot).len() == 2);
    assert_eq!(fake.posted_by(&bot)[1].0, OTHER);
    let keys = session_keys(&up);
    assert!(
        keys.iter()
            .any(|k| k.starts_with("agent:planners:discord:channel:")
                && k.contains(&format!(":thread:{thread}"))),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with(&format!("agent:others:discord:channel:{OTHER}"))),
        "{keys:?}"
    );
}

/// A stranger's DM gets a pairing code in the DM; once the operator approves it, the next DM
/// reaches the agent and is answered there, referencing it. What deepcli says on its own in a
/// DM (an approval's prompt, through the outbox) goes to the DM channel it opens with the
/// user, and a click there is the user's.
#[test]
fn a_discord_dm_pairs_then_reaches_the_agent() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    let alice = fake.user_id("alice");
    let up = start(
        &agents(&[(
            "sdk",
            &format!(
                "      permissions: {{route: origin, timeoutSeconds: 60, approvers: [\"discord:{alice}\"]}}\n"
            ),
        )]),
        &channels(&server, &["default"], "", ""),
        "bindings:\n  - agentId: sdk\n    match: {channel: discord}\n",
        &[&bot],
    );
    connected(&up, &["default"]);
    let first = fake.dm(&bot, "alice", "hello");
    fake.wait("the pairing code", |f| f.posted_by(&bot).len() == 1);
    let (channel, body) = &fake.posted_by(&bot)[0];
    assert_eq!(channel, first["channel_id"].as_str().unwrap());
    let pairing = content(body);
    assert!(pairing.contains("pairing code"), "{pairing}");
    let code = pairing
        .split("code is ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_string();
    let out = deepcli(&up, &["pairing", "approve", "discord", &code]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = fake.dm(&bot, "alice", "hello again");
    fake.wait("the answer", |f| f.posted_by(&bot).len() == 2);
    let (channel, body) = &fake.posted_by(&bot)[1];
    assert_eq!(channel, second["channel_id"].as_str().unwrap());
    assert!(content(body).starts_with("echo: hello again"), "{body}");
    assert_eq!(body["message_reference"]["message_id"], second["id"]);

    // An approval asked in the DM: the outbox opens the DM channel with alice and posts there.
    let asked = fake.dm(&bot, "alice", "permission delete /tmp/cache");
    fake.wait("the prompt in the DM", |f| {
        f.posted_by(&bot)
            .iter()
            .any(|(_, b)| b.get("components").is_some())
    });
    let opened = fake.calls_to("POST", "/users/@me/channels");
    assert_eq!(opened.len(), 1, "{opened:#?}");
    assert_eq!(opened[0].body["recipient_id"], alice.as_str());
    let dm = asked["channel_id"].as_str().unwrap();
    let prompt = fake
        .calls_to("POST", &format!("/channels/{dm}/messages"))
        .into_iter()
        .find(|c| c.status == 200 && c.body.get("components").is_some())
        .unwrap();
    let approve = prompt.body["components"][0]["components"][0]["custom_id"]
        .as_str()
        .unwrap()
        .to_string();
    fake.click(
        &bot,
        "alice",
        dm,
        prompt.message_id.as_deref().unwrap(),
        &approve,
    );
    fake.wait("the tool call allowed", |f| {
        f.posted_by(&bot)
            .iter()
            .any(|(_, b)| content(b).starts_with("permission: allow"))
    });
    fake.wait("the prompt edited", |f| {
        !f.calls_to("PATCH", &format!("/channels/{dm}/messages/"))
            .is_empty()
    });
}

/// Heartbeats carry the last sequence. A dropped connection is RESUMEd at the URL READY named,
/// with the session and the last sequence seen: the message dispatched while it was down is
/// answered, and nothing before it is delivered again. Op 7 resumes too.
#[test]
fn a_dropped_discord_gateway_resumes_without_losing_or_repeating_a_message() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    fake.heartbeat_every(Duration::from_millis(300));
    let bot = fake.install("deep", 1);
    let up = start(
        &agents(&[("sdk", "")]),
        &channels(&server, &["default"], &open_guild(), ""),
        "bindings:\n  - agentId: sdk\n    match: {channel: discord}\n",
        &[&bot],
    );
    connected(&up, &["default"]);
    fake.human("alice", GENERAL, "first", json!({}));
    fake.wait("the first answer", |f| f.posted_by(&bot).len() == 1);
    // The adapter has seen everything up to the last sequence: a heartbeat says so.
    fake.wait("a heartbeat with the last sequence", |f| {
        let last = f.last_seq(&bot);
        f.sent(1)
            .iter()
            .rev()
            .take(1)
            .any(|h| h.frame["d"].as_i64() == last)
    });
    let before = fake.last_seq(&bot).unwrap();
    fake.drop_connection(&bot);
    fake.human("alice", GENERAL, "while away", json!({}));
    fake.wait("the RESUME", |f| !f.sent(6).is_empty());
    let resume = &fake.sent(6)[0];
    assert_eq!(resume.path, "/resume/", "the URL READY named");
    assert_eq!(resume.frame["d"]["seq"], before, "{resume:?}");
    assert!(
        resume.frame["d"]["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    fake.wait("the answer to the missed message", |f| {
        f.posted_by(&bot).len() == 2
    });
    assert!(content(&fake.posted_by(&bot)[1].1).contains("while away"));

    fake.ask_reconnect(&bot);
    fake.wait("a second RESUME", |f| f.sent(6).len() == 2);
    fake.human("alice", GENERAL, "after op 7", json!({}));
    fake.wait("the answer after op 7", |f| f.posted_by(&bot).len() == 3);
    assert_eq!(fake.sent(2).len(), 1, "identified once");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fake.posted_by(&bot).len(), 3, "nothing answered twice");
    let log = channel_log(&up, "discord");
    assert!(log.contains("resumed mode=gateway"), "{log}");
    assert!(log.contains("gateway-reconnect op=7"), "{log}");
    assert!(!log.contains("redelivery"), "{log}");
}

/// An invalid session (op 9, not resumable) is identified anew, at the URL `GET /gateway/bot`
/// names, and messages after it are answered.
#[test]
fn an_invalid_discord_session_identifies_again() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    let up = start(
        &agents(&[("sdk", "")]),
        &channels(&server, &["default"], &open_guild(), ""),
        "bindings:\n  - agentId: sdk\n    match: {channel: discord}\n",
        &[&bot],
    );
    connected(&up, &["default"]);
    fake.invalidate_session(&bot);
    fake.wait("a second IDENTIFY", |f| f.sent(2).len() == 2);
    assert!(fake.sent(6).is_empty(), "not resumed");
    assert_eq!(fake.calls_to("GET", "/gateway/bot").len(), 2);
    up.wait_for("connected again", |s| {
        adapter(s, "discord", "default")["connects"].as_u64() >= Some(2)
    });
    fake.human("alice", GENERAL, "still there?", json!({}));
    fake.wait("the answer", |f| f.posted_by(&bot).len() == 1);
    assert!(channel_log(&up, "discord").contains("gateway-invalid-session op=9 resumable=false"));
}

/// A bucket used up (one post a second) is waited for before the next piece; a 429 for the
/// bucket, and one for the global limit, are waited out and the piece posted. The fake counts
/// a call made to a bucket it said was used up, or while the global limit held, as early: none.
#[test]
fn discord_rate_limits_per_bucket_and_the_global_limit_are_waited_out() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    let up = start(
        &agents(&[("sdk", "")]),
        &channels(&server, &["default"], &open_guild(), ""),
        "bindings:\n  - agentId: sdk\n    match: {channel: discord}\n",
        &[&bot],
    );
    connected(&up, &["default"]);
    fake.bucket(1, Duration::from_millis(700));
    fake.human(
        "alice",
        GENERAL,
        &format!("long {}", "word ".repeat(900)),
        json!({}),
    );
    fake.wait("three pieces", |f| f.posted_by(&bot).len() == 3);
    fake.limit_next_posts(1);
    fake.human("alice", GENERAL, "after a 429", json!({}));
    fake.wait("the answer after a 429", |f| f.posted_by(&bot).len() == 4);
    fake.global_limit_next(1);
    fake.human("alice", GENERAL, "after the global limit", json!({}));
    fake.wait("the answer after the global limit", |f| {
        f.posted_by(&bot).len() == 5
    });
    let posts = fake.calls_to("POST", &format!("/channels/{GENERAL}/messages"));
    let refused: Vec<bool> = posts
        .iter()
        .filter(|c| c.status == 429)
        .map(|c| c.early)
        .collect();
    assert_eq!(
        refused,
        [false, false],
        "one 429 each, neither early: {posts:#?}"
    );
    assert!(posts.iter().all(|c| !c.early), "{posts:#?}");
    let log = channel_log(&up, "discord");
    assert!(
        log.contains("rate-limited method=POST /channels/{id}/messages"),
        "{log}"
    );
}

/// An approval asked in a guild channel: the prompt carries Approve once / Always / Deny
/// buttons and references the message; a click is acknowledged at once (the interaction
/// callback); a member who is no approver is answered privately (an ephemeral follow-up) and
/// nothing is decided; the approver's click lets the tool call run, and the prompt becomes its
/// outcome, its buttons gone.
#[test]
fn a_discord_approval_button_runs_the_tool_call_for_an_approver_only() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    let boss = fake.user_id("boss");
    let alice_id = fake.user_id("alice");
    let up = start(
        &agents(&[(
            "alpha",
            &format!(
                "      permissions: {{route: origin, timeoutSeconds: 60, approvers: [\"discord:{boss}\"]}}\n"
            ),
        )]),
        &channels(
            &server,
            &["default"],
            &format!("    guilds:\n      \"{GUILD}\": {{}}\n"),
            "",
        ),
        "bindings:\n  - agentId: alpha\n    match: {channel: discord}\n",
        &[&bot],
    );
    connected(&up, &["default"]);
    let asked = fake.human(
        "alice",
        GENERAL,
        &format!("<@{}> clean up\npermission delete /tmp/cache", bot.user_id),
        json!({}),
    );
    fake.wait("the approval's prompt", |f| {
        f.posted_by(&bot)
            .iter()
            .any(|(_, b)| b.get("components").is_some())
    });
    let prompt = fake
        .calls_to("POST", &format!("/channels/{GENERAL}/messages"))
        .into_iter()
        .find(|c| c.status == 200 && c.body.get("components").is_some())
        .unwrap();
    assert_eq!(prompt.body["message_reference"]["message_id"], asked["id"]);
    let buttons = prompt.body["components"][0]["components"]
        .as_array()
        .unwrap();
    let ids: Vec<&str> = buttons
        .iter()
        .map(|b| b["custom_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let approve = ids[0].to_string();
    assert!(approve.starts_with("deepcli:approve:"), "{approve}");
    assert!(ids[2].starts_with("deepcli:deny:"), "{ids:?}");
    let approval = approve.trim_start_matches("deepcli:approve:").to_string();
    let message_id = prompt.message_id.clone().unwrap();

    // Someone who is no approver: acknowledged, answered privately, nothing decided.
    let click = fake.click(&bot, "alice", GENERAL, &message_id, &approve);
    fake.wait("the private refusal", |f| {
        !f.calls_to("POST", "/webhooks/").is_empty()
    });
    let callback = fake.calls_to("POST", "/interactions/");
    assert_eq!(callback.len(), 1, "{callback:#?}");
    assert_eq!(
        callback[0].path,
        format!(
            "/interactions/{}/{}/callback",
            click["id"].as_str().unwrap(),
            click["token"].as_str().unwrap()
        )
    );
    assert_eq!(callback[0].body, json!({"type": 6}));
    let followup = &fake.calls_to("POST", "/webhooks/")[0];
    assert_eq!(
        followup.path,
        format!(
            "/webhooks/{}/{}",
            bot.application_id,
            click["token"].as_str().unwrap()
        )
    );
    assert_eq!(followup.body["flags"], 64);
    assert!(
        content(&followup.body).contains("not an approver"),
        "{followup:?}"
    );
    assert!(channel_log(&up, "discord").contains(&format!(
        "click-refused approval={approval} by=discord:{alice_id}"
    )));
    assert!(
        fake.calls_to("PATCH", "/channels/").is_empty(),
        "nothing decided"
    );

    // The approver: the tool call runs, the prompt becomes its outcome.
    fake.click(&bot, "boss", GENERAL, &message_id, &approve);
    fake.wait("the agent's answer", |f| {
        f.posted_by(&bot)
            .iter()
            .any(|(_, b)| content(b).starts_with("permission: allow"))
    });
    fake.wait("the prompt edited", |f| {
        !f.calls_to("PATCH", "/channels/").is_empty()
    });
    let edit = &fake.calls_to("PATCH", "/channels/")[0];
    assert_eq!(
        edit.path,
        format!("/channels/{GENERAL}/messages/{message_id}")
    );
    assert!(
        content(&edit.body).contains(&format!("approved by discord:{boss}")),
        "{edit:?}"
    );
    assert_eq!(edit.body["components"], json!([]), "the buttons are gone");
}

/// Two bots in one thread, each bound to its agent, bots let in and no mention needed: they
/// answer each other until `maxRounds` bot replies, then one notice asks a human to step in and
/// bot messages are held; a human message re-opens the thread for as many rounds again.
#[test]
fn two_discord_bots_in_one_thread_stop_at_max_rounds_and_a_human_reopens() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let alpha = fake.install("alpha", 1);
    let beta = fake.install("beta", 2);
    let up = start(
        &agents(&[("alpha", ""), ("beta", "")]),
        &channels(
            &server,
            &["alpha", "beta"],
            &format!(
                "    defaultAccount: alpha\n    requireMention: false\n    allowBots: true\n    guilds:\n      \"{GUILD}\": {{}}\n    groups:\n      \"{GENERAL}\": {{discussion: {{maxRounds: 4}}}}\n"
            ),
            "",
        ),
        "bindings:\n  - agentId: alpha\n    match: {channel: discord, accountId: alpha}\n  - agentId: beta\n    match: {channel: discord, accountId: beta}\n",
        &[&alpha, &beta],
    );
    connected(&up, &["alpha", "beta"]);
    let thread = fake.thread(GENERAL, "debate");
    fake.human("alice", &thread, "let us discuss", json!({}));
    let posted = |f: &Fake| {
        let mut all = f.posted_by(&alpha);
        all.extend(f.posted_by(&beta));
        all
    };
    let notices = |f: &Fake| {
        posted(f)
            .iter()
            .filter(|(_, b)| content(b).starts_with("This discussion is paused"))
            .count()
    };
    let rounds = |f: &Fake| {
        posted(f)
            .iter()
            .filter(|(_, b)| content(b).starts_with("echo: "))
            .count()
    };
    fake.wait("the notice", |f| notices(f) == 1);
    // 1 human + 4 rounds + 1 notice, each seen by both bots.
    settled(&up, &[("alpha", 6), ("beta", 6)]);
    assert_eq!(rounds(fake), 4, "{:#?}", posted(fake));
    assert!(posted(fake).iter().all(|(c, _)| *c == thread));
    let log = channel_log(&up, "discord");
    assert!(log.contains("discussion paused"), "{log}");
    assert!(log.contains("why=discussion-"), "{log}");

    fake.human("alice", &thread, "go on", json!({}));
    fake.wait("the second notice", |f| notices(f) == 2);
    settled(&up, &[("alpha", 12), ("beta", 12)]);
    assert_eq!(rounds(fake), 8, "{:#?}", posted(fake));
}

/// Every event the fake sent has been taken and handled: each account saw its count and the
/// inbox is empty.
fn settled(up: &Up, counts: &[(&str, u64)]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = up.status()
            && counts
                .iter()
                .all(|(a, n)| adapter(&s, "discord", a)["events"].as_u64() == Some(*n))
            && inbox(up) == 0
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "events not handled: {counts:?}; status: {:#?}; the channel's log:\n{}",
            up.status().map(|s| s["channels"]["discord"].clone()),
            channel_log(up, "discord")
        );
        std::thread::sleep(Duration::from_millis(50));
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

/// `channels resolve` finds guild channels, members and roles by name (and says what it does
/// not find); `status --probe` reports the live connection; `logout` takes it down and `login`
/// checks the token with `GET /users/@me` and lets it connect again.
#[test]
fn discord_names_resolve_and_login_logout_and_the_probe_work() {
    let server = Server::start().unwrap();
    let fake: &Fake = &server.fake;
    let bot = fake.install("deep", 1);
    let alice = fake.user_id("alice");
    let up = start(
        &agents(&[("sdk", "")]),
        &channels(&server, &["default"], &open_guild(), ""),
        "bindings:\n  - agentId: sdk\n    match: {channel: discord}\n",
        &[&bot],
    );
    connected(&up, &["default"]);
    let out = deepcli(
        &up,
        &[
            "channels",
            "resolve",
            "#general",
            "@alice",
            "&admin",
            "#nope",
            "--channel",
            "discord",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "a name not resolved fails");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["names"],
        json!([
            {"name": "#general", "kind": "channel", "status": "found", "id": GENERAL},
            {"name": "@alice", "kind": "user", "status": "found", "id": alice},
            {"name": "&admin", "kind": "role", "status": "found", "id": ADMIN_ROLE},
            {"name": "#nope", "kind": "channel", "status": "not-found"},
        ]),
        "{doc:#}"
    );
    let out = deepcli(&up, &["channels", "status", "--probe", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["accounts"][0]["probe"],
        json!({"result": "connected", "bot": format!("{} (deep)", bot.user_id)}),
        "{doc:#}"
    );
    let out = deepcli(
        &up,
        &["channels", "logout", "--channel", "discord", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["forgotIdentity"], true, "{doc:#}");
    up.wait_for("the connection down", |s| {
        adapter(s, "discord", "default")["state"] == "disabled"
    });
    fake.wait("the connection closed", |f| !f.connected(&bot));
    let out = deepcli(&up, &["channels", "login", "--channel", "discord"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("bot {} (deep); recorded", bot.user_id)),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!fake.calls_to("GET", "/users/@me").is_empty());
    connected(&up, &["default"]);
}
