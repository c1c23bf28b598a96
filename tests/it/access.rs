//! The Access layer end to end: `deepcli up` serving `POST /v1/inbound`, delivering to real ACP
//! runtimes (the demo echo agent and the echo agent on the official TypeScript SDK), with
//! sessions, transcripts and deliveries in the state database.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{PgSchema, Up, open, transcript};
use serde_json::{Value, json};

const SECRET: &str = "quickstart-webhook-secret";

/// One HTTP call: status, plan generation header, JSON body.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Option<u64>, Value) {
    let answer = crate::common::http(addr, method, path, headers, body);
    (answer.status, answer.generation, answer.body)
}

/// `POST /v1/inbound` signed with `secret`.
fn inbound(addr: SocketAddr, secret: &str, envelope: &Value) -> (u16, Value) {
    crate::common::signed_inbound(addr, secret.as_bytes(), envelope)
}

fn token(state: &Path) -> String {
    std::fs::read_to_string(state.join("operator-token")).unwrap()
}

/// The quickstart's bot (`botUserId`) and the one sender its `allowFrom` lets in.
const QUICKSTART_BOT: &str = "7000000001";
const QUICKSTART_SENDER: &str = "111111111";

/// A message of the quickstart's allowed sender that mentions its bot: the inbound policy lets
/// it through in a direct chat and in the listed group.
fn envelope(peer: Value, message_id: &str, text: &str) -> Value {
    json!({"channel": "telegram", "peer": peer, "messageId": message_id,
           "sender": {"id": QUICKSTART_SENDER, "name": "Ada"}, "mentions": [QUICKSTART_BOT],
           "text": text})
}

fn group(id: &str) -> Value {
    json!({"kind": "group", "id": id})
}

/// Whether a runtime session was opened for `session_key`: its delivery holds the session's
/// turn and is about to prompt.
fn session_opened(state: &Path, session_key: &str) -> bool {
    let Ok(db) = rusqlite::Connection::open(state.join("state.db")) else {
        return false;
    };
    db.query_row(
        "SELECT count(*) FROM sessions WHERE session_key = ?1",
        [session_key],
        |r| r.get::<_, i64>(0),
    )
    .is_ok_and(|n| n == 1)
}

fn runtime_session(state: &Path, session_key: &str) -> String {
    let db = rusqlite::Connection::open(state.join("state.db")).unwrap();
    db.query_row(
        "SELECT runtime_session_id FROM sessions WHERE session_key = ?1",
        [session_key],
        |r| r.get(0),
    )
    .unwrap()
}

/// `deepcli up` on the bundled quickstart, its webhook secret uncommented (as docs/access.md
/// says to, to take signed calls) and set.
fn quickstart(configure: impl FnOnce(&mut std::process::Command)) -> Up {
    quickstart_with("", configure)
}

/// [`quickstart`], with `more` appended to its agents.yaml.
fn quickstart_with(more: &str, configure: impl FnOnce(&mut std::process::Command)) -> Up {
    quickstart_edited(|agents| agents + more, configure)
}

/// [`quickstart`], with its agents.yaml edited by `edit`.
fn quickstart_edited(
    edit: impl FnOnce(String) -> String,
    configure: impl FnOnce(&mut std::process::Command),
) -> Up {
    quickstart_on(None, edit, configure)
}

/// [`quickstart_edited`], the state's database in `postgres` when given (`--state-url`).
fn quickstart_on(
    postgres: Option<PgSchema>,
    edit: impl FnOnce(String) -> String,
    configure: impl FnOnce(&mut std::process::Command),
) -> Up {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let (agents, channels, bindings) = (
        edit(read("agents.yaml")),
        read("channels.yaml").replace("# webhookSecret:", "webhookSecret:"),
        read("bindings.yaml"),
    );
    let files = [
        ("agents.yaml", agents.as_str()),
        ("channels.yaml", channels.as_str()),
        ("bindings.yaml", bindings.as_str()),
    ];
    let up = Up::start_on(&files, postgres, |cmd| {
        cmd.env("DEEPCLI_WEBHOOK_SECRET", SECRET)
            .args(["--body-limit", "4096"]);
        configure(cmd);
    });
    up.wait_for("research ready", |s| {
        Up::runtime(s, "research").is_some_and(|r| r["status"] == "ready")
    });
    up
}

fn metric(addr: SocketAddr, state: &Path, name: &str) -> f64 {
    let (_, _, text) = call(
        addr,
        "GET",
        "/metrics",
        &[("authorization", &format!("Bearer {}", token(state)))],
        b"",
    );
    text.as_str()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_signed_envelope_gets_a_reply_in_a_persistent_session() {
    // main without a runtime, as a config-only agent is.
    let main_runs = "      runtime:\n        kind: acp\n        command: [deepcli, demo-agent]\n\n    - id: research";
    let up = quickstart_edited(
        |agents| {
            assert!(agents.contains(main_runs));
            agents.replace(
                main_runs,
                "      runtime: {kind: none}\n\n    - id: research",
            )
        },
        |_| {},
    );
    let research = "-1001234567890";

    let (status, first) = inbound(up.addr, SECRET, &envelope(group(research), "m-1", "hello"));
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["reply"]["text"], "echo: hello");
    assert_eq!(first["duplicate"], false);
    assert_eq!(first["route"]["agentId"], "research");
    assert_eq!(first["route"]["matchedBy"], "binding.peer");
    let key = first["sessionKey"].as_str().unwrap();
    assert_eq!(key, format!("agent:research:telegram:group:{research}"));

    // The same peer: the same session, both turns in its transcript.
    let (status, second) = inbound(up.addr, SECRET, &envelope(group(research), "m-2", "again"));
    assert_eq!(status, 200, "{second:#}");
    assert_eq!(second["sessionKey"], key);
    let turns = transcript(&up.state, key);
    let said: Vec<(&str, &str)> = turns
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .filter(|(p, _)| *p != "acp")
        .collect();
    assert_eq!(
        said,
        [
            ("inbound", "hello"),
            ("agent", "echo: hello"),
            ("inbound", "again"),
            ("agent", "echo: again")
        ]
    );
    let session = runtime_session(&up.state, key);

    // A thread of that peer: another session key and another runtime session.
    let mut threaded = envelope(group(research), "m-3", "in a thread");
    threaded["threadId"] = "T-9".into();
    let (status, third) = inbound(up.addr, SECRET, &threaded);
    assert_eq!(status, 200, "{third:#}");
    let thread_key = format!("{key}:thread:t-9");
    assert_eq!(third["sessionKey"], thread_key.as_str());
    assert_ne!(runtime_session(&up.state, &thread_key), session);

    // Another chat goes to `main`, which has no runtime: routed, 202, no reply.
    let elsewhere = json!({"kind": "direct", "id": "222222222"});
    let (status, other) = inbound(up.addr, SECRET, &envelope(elsewhere, "m-4", "hi"));
    assert_eq!(status, 202, "{other:#}");
    assert_eq!(other["route"]["agentId"], "main");
    assert!(other["reply"].is_null());
    assert!(
        other["note"]
            .as_str()
            .unwrap()
            .contains("has no runtime (runtime kind none)")
    );
    assert_ne!(other["sessionKey"], key);
}

/// `/status` is the hub's to answer (conversations.md, "Session lifecycle"): the session's
/// agent, age, queue and budget, without a turn and without a line in the agent's transcript.
#[test]
fn status_in_a_chat_is_answered_by_the_hub_without_a_turn() {
    let up = quickstart(|_| {});
    let research = "-1001234567890";
    let key = format!("agent:research:telegram:group:{research}");
    let status_of = |id: &str| {
        let (status, answer) = inbound(up.addr, SECRET, &envelope(group(research), id, "/status"));
        assert_eq!(status, 200, "{answer:#}");
        assert_eq!(answer["statusCommand"], true, "{answer:#}");
        assert_eq!(answer["sessionKey"], key.as_str());
        answer["reply"]["text"].as_str().unwrap().to_string()
    };
    let before = status_of("m-0");
    assert!(
        before.contains(&format!("session {key} (agent research)"))
            && before.contains("not started yet"),
        "{before}"
    );

    let (status, first) = inbound(up.addr, SECRET, &envelope(group(research), "m-1", "hello"));
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["reply"]["text"], "echo: hello");
    let after = status_of("m-2");
    for part in [
        "started ",
        " s ago",
        "queue: idle",
        "budget: 1 turn in the last hour",
    ] {
        assert!(after.contains(part), "{part:?} in {after}");
    }
    // Only the real message reached the agent.
    let said: Vec<(String, String)> = transcript(&up.state, &key)
        .into_iter()
        .filter(|(p, _)| p != "acp")
        .collect();
    assert_eq!(
        said,
        [
            ("inbound".to_string(), "hello".to_string()),
            ("agent".to_string(), "echo: hello".to_string())
        ]
    );
}

/// `/new` starts a new session under the same key (conversations.md, "Session lifecycle"): a
/// new runtime session with nothing from before, a new transcript segment, the old one readable
/// with `sessions history --all`; the command itself never reaches the agent.
#[test]
fn new_in_a_chat_starts_a_new_session_under_the_same_key() {
    let up = quickstart(|_| {});
    let research = "-1001234567890";
    let key = format!("agent:research:telegram:group:{research}");
    let say = |id: &str, text: &str| {
        let (status, answer) = inbound(up.addr, SECRET, &envelope(group(research), id, text));
        assert_eq!(status, 200, "{answer:#}");
        assert_eq!(answer["sessionKey"], key.as_str());
        answer
    };
    assert_eq!(say("m-1", "hello")["reply"]["text"], "echo: hello");
    let first = runtime_session(&up.state, &key);

    let reset = say("m-2", "/new");
    assert_eq!(reset["resetCommand"], true, "{reset:#}");
    assert_eq!(reset["reset"], true, "{reset:#}");
    let said = reset["reply"]["text"].as_str().unwrap();
    assert!(said.starts_with("New session"), "{said}");
    // A redelivery of the command gets its answer and resets nothing again.
    let (status, again) = inbound(up.addr, SECRET, &envelope(group(research), "m-2", "/new"));
    assert_eq!(status, 200, "{again:#}");
    assert_eq!(again["duplicate"], true, "{again:#}");

    assert_eq!(say("m-3", "again")["reply"]["text"], "echo: again");
    assert_ne!(runtime_session(&up.state, &key), first);

    let history = |all: bool| -> Vec<(String, String)> {
        let mut args = vec!["sessions", "history", key.as_str(), "--json"];
        if all {
            args.push("--all");
        }
        let out = up.deepcli(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let (p, t) = (m["provenance"].as_str(), m["text"].as_str());
                (p.unwrap().to_string(), t.unwrap().to_string())
            })
            .filter(|(p, _)| p != "acp")
            .collect()
    };
    let current = history(false);
    assert_eq!(current.len(), 3, "{current:?}");
    assert_eq!(current[0].0, "reset");
    assert!(
        current[0].1.starts_with("new session: /new from telegram:"),
        "{current:?}"
    );
    assert_eq!(
        &current[1..],
        [
            ("inbound".to_string(), "again".to_string()),
            ("agent".to_string(), "echo: again".to_string())
        ]
    );
    let all = history(true);
    assert_eq!(
        all.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["inbound", "agent", "reset", "inbound", "agent"],
        "{all:?}"
    );
    // The new runtime session was not given the old conversation as context.
    let notes: Vec<String> = transcript(&up.state, &key)
        .into_iter()
        .filter(|(p, _)| p == "acp")
        .map(|(_, t)| t)
        .collect();
    assert!(
        !notes.iter().any(|n| n.contains("given as context")),
        "{notes:?}"
    );
}

/// `session.reset: idle` (conversations.md): the first message after `idleMinutes` without
/// one finds a new session under the same key — a new runtime session, a `reset` line saying
/// why — before it is prompted. The hub's clock is moved on through the failpoints clock.
/// `session.resetTriggers` replaces the chat commands: `/fresh` starts over, `/new` is a message.
#[test]
fn an_idle_session_starts_over_at_its_next_message() {
    let clock = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(clock.path(), "0").unwrap();
    let up = quickstart_with(
        "session:\n  reset: {mode: idle, idleMinutes: 30}\n  resetTriggers: [\"/fresh\"]\n",
        |cmd| {
            cmd.env("DEEPCLI_FAILPOINT_CLOCK_FILE", clock.path());
        },
    );
    let research = "-1001234567890";
    let key = format!("agent:research:telegram:group:{research}");
    let say = |id: &str, text: &str| {
        let (status, answer) = inbound(up.addr, SECRET, &envelope(group(research), id, text));
        assert_eq!(status, 200, "{answer:#}");
        answer
    };
    assert_eq!(say("m-1", "hello")["reply"]["text"], "echo: hello");
    let first = runtime_session(&up.state, &key);
    assert_eq!(
        say("m-2", "soon after")["reply"]["text"],
        "echo: soon after"
    );
    assert_eq!(runtime_session(&up.state, &key), first, "not idle yet");

    // An hour later the session has been idle past its 30 minutes.
    std::fs::write(clock.path(), "3600").unwrap();
    assert_eq!(say("m-3", "later")["reply"]["text"], "echo: later");
    assert_ne!(
        runtime_session(&up.state, &key),
        first,
        "a new runtime session"
    );
    let rows = transcript(&up.state, &key);
    let reset = rows
        .iter()
        .position(|(p, _)| p == "reset")
        .expect("a reset line");
    assert!(
        rows[reset]
            .1
            .starts_with("new session: 30 minutes without a message (session.reset"),
        "{rows:?}"
    );
    assert!(
        rows[reset + 1..]
            .iter()
            .any(|(p, t)| p == "inbound" && t == "later"),
        "the message that found it stale is the new segment's first: {rows:?}"
    );

    // The triggers are the configured ones: `/new` is a message, `/fresh` starts over.
    assert_eq!(say("m-4", "/new")["reply"]["text"], "echo: /new");
    let fresh = say("m-5", "/fresh");
    assert_eq!(fresh["resetCommand"], true, "{fresh:#}");
}

#[test]
fn refusals_say_why_and_route_nothing() {
    let up = quickstart(|_| {});
    let good = envelope(group("-1001234567890"), "m-1", "hello");
    let body = good.to_string();
    let routed = || metric(up.addr, &up.state, "deepcli_route_decisions_total");
    let before = routed();

    let post = |headers: &[(&str, &str)], body: &[u8]| {
        let (status, _, value) = call(up.addr, "POST", "/v1/inbound", headers, body);
        (status, value)
    };
    let (status, missing) = post(&[], body.as_bytes());
    assert_eq!(status, 401);
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .contains("X-Deepcli-Signature")
    );
    let wrong = deepcli::sign(b"not the secret", body.as_bytes());
    let (status, wrong) = post(&[("x-deepcli-signature", &wrong)], body.as_bytes());
    assert_eq!(status, 401);
    assert!(
        wrong["error"].as_str().unwrap().contains("does not verify"),
        "{wrong}"
    );
    assert_eq!(routed(), before, "nothing was routed");

    // An undeclared account answers as a wrong signature does; the operator's log says which.
    let unknown = json!({"channel": "slack", "messageId": "m", "text": "x"});
    let (status, body) = inbound(up.addr, SECRET, &unknown);
    assert_eq!((status, &body), (401, &wrong));
    let log = std::fs::read_to_string(up.state.join("logs/access.log")).unwrap();
    assert!(
        log.contains("channel=slack 401 unknown channel account `slack/default`"),
        "{log}"
    );

    let big = envelope(group("1"), "m-big", &"x".repeat(5000));
    let (status, body) = inbound(up.addr, SECRET, &big);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["limit"], 4096);

    let signature = deepcli::sign(SECRET.as_bytes(), b"{not json");
    let (status, body) = post(&[("x-deepcli-signature", &signature)], b"{not json");
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("not an envelope")
    );

    let (status, body) = inbound(
        up.addr,
        SECRET,
        &json!({"channel": "telegram", "text": "no id"}),
    );
    assert_eq!(status, 400);
    assert_eq!(body["field"], "messageId", "{body}");

    // The operator endpoints want the token.
    let (status, _, _) = call(up.addr, "GET", "/v1/plan", &[], b"");
    assert_eq!(status, 401);
    let auth = format!("Bearer {}", token(&up.state));
    let (status, generation, plan) =
        call(up.addr, "GET", "/v1/plan", &[("authorization", &auth)], b"");
    assert_eq!(status, 200);
    assert_eq!(plan["generation"], 1);
    assert_eq!(generation, Some(1), "the generation header");
    let published: serde_json::Value =
        serde_json::from_slice(&std::fs::read(up.state.join("routing-plan.json")).unwrap())
            .unwrap();
    assert_eq!(
        plan["contentHash"], published["contentHash"],
        "the plan served is the plan published"
    );
    let (status, _, route) = call(
        up.addr,
        "POST",
        "/v1/route",
        &[("authorization", &auth)],
        br#"{"channel": "telegram", "peer": {"kind": "group", "id": "-1001234567890"}}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(route["agentId"], "research");

    // Each call is a line in the channel's log, which `deepcli channels logs` shows.
    let (status, _) = inbound(up.addr, SECRET, &good);
    assert_eq!(status, 200);
    let out = std::process::Command::new(crate::common::bin())
        .args(["--config", up.config.to_str().unwrap()])
        .args(["--state-dir", up.state.to_str().unwrap()])
        .args(["channels", "logs", "--channel", "telegram", "--json"])
        .output()
        .unwrap();
    let logs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lines: Vec<&str> = logs["logs"][0]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        lines[0].contains(" 401 missing `X-Deepcli-Signature"),
        "{lines:?}"
    );
    assert!(
        lines.last().unwrap().contains(" 200 account=default session=agent:research:telegram:group:-1001234567890 agent=research matchedBy=binding.peer"),
        "{lines:?}"
    );
}

#[test]
fn an_acp_binding_keeps_its_session_across_a_controller_restart() {
    let mut up = quickstart(|_| {});
    let dm = json!({"kind": "direct", "id": "111111111"});
    let (status, first) = inbound(up.addr, SECRET, &envelope(dm.clone(), "d-1", "remember me"));
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["route"]["matchedBy"], "binding.acp");
    assert_eq!(first["route"]["agentId"], "research");
    let key = first["sessionKey"].as_str().unwrap().to_string();
    assert!(key.starts_with("agent:research:acp:"), "{key}");

    assert!(up.terminate().success());
    up.restart(|cmd| {
        cmd.env("DEEPCLI_WEBHOOK_SECRET", SECRET);
    });
    up.wait_for("research ready again", |s| {
        Up::runtime(s, "research").is_some_and(|r| r["status"] == "ready")
    });
    let (status, second) = inbound(up.addr, SECRET, &envelope(dm, "d-2", "still there?"));
    assert_eq!(status, 200, "{second:#}");
    assert_eq!(second["sessionKey"], key.as_str(), "the same session");
    // The demo agent cannot load sessions: a new one got the transcript as context.
    let reply = second["reply"]["text"].as_str().unwrap();
    assert!(
        reply.contains("remember me") && reply.contains("still there?"),
        "{reply}"
    );
    let notes: Vec<String> = transcript(&up.state, &key)
        .into_iter()
        .filter(|(p, _)| p == "acp")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[1].contains("were given as context"), "{notes:?}");
}

#[test]
fn a_runtime_that_is_down_gets_a_503() {
    let agents = "agents:\n  list:\n    - id: main\n    - id: broken\n      runtime: {kind: acp, command: [\"false\"]}\n";
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: broken, match: {channel: slack}}\n";
    let up = Up::start_config(agents, channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the crash loop", |s| {
        Up::runtime(s, "broken").is_some_and(|r| r["status"] == "crash-loop")
    });
    let message = json!({"channel": "slack", "peer": {"kind": "direct", "id": "u1"}, "messageId": "x-1", "text": "hi"});
    let started = Instant::now();
    let (status, body) = inbound(up.addr, SECRET, &message);
    assert_eq!(status, 503, "{body}");
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    assert_eq!(body["agentId"], "broken");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("send it again later")
    );
}

/// Issue 24: the Access API listens before the first apply has finished; until a plan is in
/// force, an inbound message and a route get 503 — even with the new routing-plan.json already
/// on disk, as the first apply is held (a failpoint pauses it) between writing it and
/// recording it. Released, the apply finishes and the same message is routed.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it)"
)]
fn before_the_first_plan_is_in_force_messages_get_503() {
    let mark = tempfile::tempdir().unwrap();
    let paused = mark.path().join("paused");
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let up = Up::start_config(
        "agents:\n  list:\n    - id: main\n",
        channels,
        "bindings: []\n",
        |cmd| {
            cmd.env("HOOK", SECRET)
                .env("DEEPCLI_FAILPOINT", "after:routing.publish:1")
                .env("DEEPCLI_FAILPOINT_PAUSE", &paused);
        },
    );
    crate::common::wait_until("the first apply to reach the failpoint", || paused.exists());
    assert!(
        up.state.join("routing-plan.json").exists(),
        "written, not in force"
    );
    let message = slack_group("early", "e-1", "too early");
    let (status, body) = inbound(up.addr, SECRET, &message);
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no routing plan is in force yet"),
        "{body}"
    );
    let auth = format!("Bearer {}", token(&up.state));
    let route = br#"{"channel": "slack", "peer": {"kind": "group", "id": "early"}}"#;
    let (status, generation, body) = call(
        up.addr,
        "POST",
        "/v1/route",
        &[("authorization", &auth)],
        route,
    );
    assert_eq!((status, generation), (503, None), "{body}");
    assert!(up.status().unwrap()["routingGeneration"].is_null());

    std::fs::remove_file(&paused).unwrap();
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let (status, body) = inbound(up.addr, SECRET, &message);
    assert_eq!(status, 202, "routed now: {body}");
    assert_eq!(body["route"]["agentId"], "main");
    assert_eq!(body["duplicate"], false, "the 503 recorded nothing: {body}");
}

/// Issue 24: an account that is disabled, or whose channel is, refuses a correctly signed
/// message with 403 and routes nothing; a wrong signature to it is still 401 (only a caller
/// that signed correctly learns that it is disabled); an enabled account of the same channel
/// takes the message.
#[test]
fn a_disabled_account_or_channel_gets_403() {
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n      off: {enabled: false, webhookSecret: {source: env, id: HOOK}}\n  telegram:\n    enabled: false\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let up = Up::start_config(
        "agents:\n  list:\n    - id: main\n",
        channels,
        "bindings: []\n",
        |cmd| {
            cmd.env("HOOK", SECRET);
        },
    );
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let routed = || metric(up.addr, &up.state, "deepcli_route_decisions_total");
    let mut off = slack_group("c1", "m-1", "hi");
    off["accountId"] = "off".into();
    let telegram = envelope(group("-100"), "m-1", "hi");

    for (what, message) in [
        ("a disabled account", &off),
        ("a disabled channel", &telegram),
    ] {
        let (status, body) = inbound(up.addr, "not the secret", message);
        assert_eq!(status, 401, "{what}, wrongly signed: {body}");
        let (status, body) = inbound(up.addr, SECRET, message);
        assert_eq!(status, 403, "{what}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("is disabled"),
            "{what}: {body}"
        );
    }
    assert_eq!(routed(), 0.0, "nothing was routed");
    let (status, body) = inbound(up.addr, SECRET, &slack_group("c1", "m-1", "hi"));
    assert_eq!(status, 202, "the enabled account: {body}");
    assert_eq!(routed(), 1.0);
}

/// Issue 24: the idempotency key holds the account: message 42 on one account of a channel is
/// not message 42 on another, though both land in the same session.
#[test]
fn the_same_message_id_on_another_account_is_another_message() {
    let agents = crate::common::sdk_agents();
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n      b: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: sdk, match: {channel: slack, accountId: \"*\"}}\n";
    let up = Up::start_config(&agents, channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the SDK agent ready", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let on = |account: &str, text: &str| {
        let mut message = slack_group("shared", "42", text);
        message["accountId"] = account.into();
        message
    };
    let (status, first) = inbound(up.addr, SECRET, &on("default", "on default"));
    assert_eq!(status, 200, "{first}");
    let (status, second) = inbound(up.addr, SECRET, &on("b", "on b"));
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["duplicate"], false, "{second}");
    assert_eq!(second["route"]["accountId"], "b");
    assert_eq!(second["reply"]["text"], "echo: on b (turn 2)", "{second}");
    assert_eq!(second["sessionKey"], first["sessionKey"], "one session");
    // Each account still deduplicates its own.
    for (account, reply) in [
        ("default", "echo: on default (turn 1)"),
        ("b", "echo: on b (turn 2)"),
    ] {
        let (status, again) = inbound(up.addr, SECRET, &on(account, "again"));
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["duplicate"], true, "{account}: {again}");
        assert_eq!(again["reply"]["text"], reply, "{account}");
    }
}

/// Issue 24: the route the Access API gives — `POST /v1/route`, and the `route` of an inbound
/// message's answer — is exactly what `deepcli route --json` prints for the same input, on
/// every tier of the route fixture (an `acp` binding's inbound route aside, as documented).
#[test]
fn the_access_route_is_what_deepcli_route_json_prints() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/route");
    let read = |name: &str| std::fs::read_to_string(fixture.join(name)).unwrap();
    let hook = "{webhookSecret: {source: env, id: HOOK}}";
    let channels = open(&format!(
        "channels:\n  discord:\n    accounts:\n      default: {hook}\n  slack:\n    accounts:\n      default: {hook}\n  telegram:\n    accounts:\n      default: {hook}\n      biz: {hook}\n"
    ));
    let up = Up::start_config(
        &read("agents.yaml"),
        &channels,
        &read("bindings.yaml"),
        |cmd| {
            cmd.env("HOOK", SECRET);
        },
    );
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let auth = format!("Bearer {}", token(&up.state));
    // (flags of `deepcli route`, the same input as JSON, whether it has an acp binding)
    let cases: &[(&[&str], Value, bool)] = &[
        (
            &["--channel", "telegram", "--peer", "direct:111"],
            json!({"channel": "telegram", "peer": {"kind": "direct", "id": "111"}}),
            false,
        ),
        (
            &[
                "--channel",
                "telegram",
                "--account",
                "biz",
                "--peer",
                "direct:111",
            ],
            json!({"channel": "telegram", "accountId": "biz", "peer": {"kind": "direct", "id": "111"}}),
            false,
        ),
        (
            &[
                "--channel",
                "discord",
                "--guild",
                "g1",
                "--peer",
                "channel:c-mod",
            ],
            json!({"channel": "discord", "guildId": "g1", "peer": {"kind": "channel", "id": "c-mod"}}),
            false,
        ),
        (
            &[
                "--channel",
                "discord",
                "--guild",
                "g1",
                "--role",
                "officer",
                "--peer",
                "group:x",
            ],
            json!({"channel": "discord", "guildId": "g1", "memberRoleIds": ["officer"], "peer": {"kind": "group", "id": "x"}}),
            false,
        ),
        (
            &[
                "--channel",
                "discord",
                "--guild",
                "g1",
                "--peer",
                "channel:t-1",
                "--parent-peer",
                "channel:c-mod",
            ],
            json!({"channel": "discord", "guildId": "g1", "peer": {"kind": "channel", "id": "t-1"}, "parentPeer": {"kind": "channel", "id": "c-mod"}}),
            false,
        ),
        (
            &[
                "--channel",
                "discord",
                "--guild",
                "g2",
                "--peer",
                "channel:c-mod",
            ],
            json!({"channel": "discord", "guildId": "g2", "peer": {"kind": "channel", "id": "c-mod"}}),
            false,
        ),
        (
            &["--channel", "discord", "--peer", "direct:222"],
            json!({"channel": "discord", "peer": {"kind": "direct", "id": "222"}}),
            false,
        ),
        (
            &[
                "--channel",
                "slack",
                "--team",
                "t1",
                "--peer",
                "channel:C1",
                "--group-scope",
                "main",
            ],
            json!({"channel": "slack", "teamId": "t1", "peer": {"kind": "channel", "id": "C1"}, "groupScope": "main"}),
            false,
        ),
        (
            &[
                "--channel",
                "Slack",
                "--peer",
                "direct:U9",
                "--dm-scope",
                "per-peer",
            ],
            json!({"channel": "Slack", "peer": {"kind": "direct", "id": "U9"}, "dmScope": "per-peer"}),
            false,
        ),
        (
            &["--channel", "discord", "--peer", "channel:c-acp"],
            json!({"channel": "discord", "peer": {"kind": "channel", "id": "c-acp"}}),
            true,
        ),
    ];
    for (i, (flags, input, acp)) in cases.iter().enumerate() {
        let out = std::process::Command::new(crate::common::bin())
            .args(["--config", up.config.to_str().unwrap(), "route", "--json"])
            .args(*flags)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{flags:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cli: Value = serde_json::from_slice(&out.stdout).unwrap();

        let (status, _, served) = call(
            up.addr,
            "POST",
            "/v1/route",
            &[("authorization", &auth)],
            input.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{flags:?}: {served}");
        assert_eq!(served, cli, "/v1/route for {flags:?}");

        let mut message = input.clone();
        message["messageId"] = format!("r-{i}").into();
        message["text"] = "hi".into();
        let (status, answer) = inbound(up.addr, SECRET, &message);
        assert_eq!(status, 202, "{flags:?}: {answer}");
        if *acp {
            assert_eq!(answer["route"]["matchedBy"], "binding.acp", "{answer}");
        } else {
            assert_eq!(answer["route"], cli, "/v1/inbound for {flags:?}");
        }
    }
}

/// The echo agent on the ACP TypeScript SDK: counts turns per session, can load sessions, and
/// answers `slow` only when cancelled.
fn sdk_up(configure: impl FnOnce(&mut std::process::Command)) -> Up {
    let agents = crate::common::sdk_agents();
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: sdk, match: {channel: slack}}\n";
    let up = Up::start_config(&agents, channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
        configure(cmd);
    });
    up.wait_for("the SDK agent ready", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    up
}

/// A message in a Slack channel: a session of its own (DMs share the main session by default).
fn slack_group(peer: &str, message_id: &str, text: &str) -> Value {
    json!({"channel": "slack", "peer": {"kind": "group", "id": peer}, "messageId": message_id, "text": text})
}

fn slack(peer: &str, message_id: &str, text: &str) -> Value {
    json!({"channel": "slack", "peer": {"kind": "direct", "id": peer}, "messageId": message_id, "text": text})
}

/// Six copies of one envelope sent at once (released together by a barrier) while their
/// session is busy with a slow prompt, so that every copy is in flight before the first can be
/// answered: one delivery reaches the agent, and the five others get its answer.
#[test]
fn a_redelivered_envelope_reaches_the_agent_once_even_when_deliveries_race() {
    let up = sdk_up(|cmd| {
        cmd.args(["--prompt-timeout-ms", "5000"]);
    });
    let message = slack_group("race", "race-1", "once");
    let copies = 6;
    let barrier = std::sync::Barrier::new(copies);
    let duplicates = || metric(up.addr, &up.state, "deepcli_duplicate_deliveries_total");
    let (slow, answers) = std::thread::scope(|s| {
        let slow = s.spawn(|| inbound(up.addr, SECRET, &slack_group("race", "race-0", "slow")));
        crate::common::wait_until("the slow prompt to hold the session", || {
            session_opened(&up.state, "agent:sdk:slack:group:race")
        });
        let handles: Vec<_> = (0..copies)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    inbound(up.addr, SECRET, &message)
                })
            })
            .collect();
        let answers: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (slow.join().unwrap(), answers)
    });
    assert_eq!(slow.0, 504, "the slow prompt timed out: {}", slow.1);
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "{answers:?}"
    );
    let firsts = answers
        .iter()
        .filter(|(_, b)| b["duplicate"] == false)
        .count();
    assert_eq!(firsts, 1, "{answers:?}");
    for (_, body) in &answers {
        assert_eq!(body["reply"]["text"], "echo: once (turn 2)");
    }
    assert_eq!(
        duplicates(),
        (copies - 1) as f64,
        "every other copy waited for the first delivery (none was answered from the store)"
    );
    // Later, a plain redelivery: the stored reply.
    let (status, again) = inbound(up.addr, SECRET, &message);
    assert_eq!(status, 200);
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["reply"]["text"], "echo: once (turn 2)");
    // The agent saw one prompt of it: the next message is its third turn.
    let (_, next) = inbound(up.addr, SECRET, &slack_group("race", "race-2", "next"));
    assert_eq!(next["reply"]["text"], "echo: next (turn 3)", "{next}");
}

/// A delivery is recorded before it is answered: after the controller is killed and started
/// again, a redelivery gets the stored response with `duplicate: true`, and the agent never
/// sees the message again (it loads its session, so its turns carry on).
#[test]
fn a_redelivery_after_a_controller_restart_gets_the_stored_response() {
    let mut up = sdk_up(|_| {});
    let message = slack_group("again", "a-1", "before the restart");
    let (status, first) = inbound(up.addr, SECRET, &message);
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["reply"]["text"], "echo: before the restart (turn 1)");

    up.child.kill().unwrap();
    up.child.wait().unwrap();
    up.restart(|cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the SDK agent ready again", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let (status, again) = inbound(up.addr, SECRET, &message);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    for key in ["route", "sessionKey", "reply"] {
        assert_eq!(again[key], first[key], "{key}: the stored response");
    }
    let (_, next) = inbound(up.addr, SECRET, &slack_group("again", "a-2", "after"));
    assert_eq!(next["reply"]["text"], "echo: after (turn 2)", "{next}");
    let key = first["sessionKey"].as_str().unwrap();
    let inbound_turns: Vec<String> = transcript(&up.state, key)
        .into_iter()
        .filter(|(p, _)| p == "inbound")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(inbound_turns, ["before the restart", "after"]);
}

#[test]
fn a_slow_prompt_times_out_and_the_agent_gets_session_cancel() {
    let mut up = sdk_up(|cmd| {
        cmd.args(["--prompt-timeout-ms", "1500"]);
    });
    let (status, body) = inbound(up.addr, SECRET, &slack("u2", "slow-1", "slow please"));
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["cancelled"], true);
    assert_eq!(
        body["stopReason"], "cancelled",
        "the agent stopped its turn because it received session/cancel"
    );
    // Recorded as uncertain (the agent may have acted before it stopped): sending it again
    // is answered with that state, and the agent is not prompted blindly a second time.
    let (status, retry) = inbound(up.addr, SECRET, &slack("u2", "slow-1", "fast now"));
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["duplicate"], true, "{retry}");
    assert_eq!(retry["state"], "uncertain", "{retry}");
    assert_eq!(retry["cancel"], "confirmed", "{retry}");
    // A new message is a new turn.
    let (_, next) = inbound(up.addr, SECRET, &slack("u2", "slow-2", "fast now"));
    assert_eq!(next["duplicate"], false, "{next}");
    assert_eq!(next["reply"]["text"], "echo: fast now (turn 2)");

    // The SDK agent loads sessions: after a restart the same runtime session resumes.
    let key = retry["sessionKey"].as_str().unwrap().to_string();
    let session = runtime_session(&up.state, &key);
    assert!(up.terminate().success());
    up.restart(|cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the SDK agent ready again", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let (status, resumed) = inbound(up.addr, SECRET, &slack("u2", "slow-3", "back"));
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["reply"]["text"], "echo: back (turn 3)");
    assert_eq!(runtime_session(&up.state, &key), session);
    let notes: Vec<String> = transcript(&up.state, &key)
        .into_iter()
        .filter(|(p, _)| p == "acp")
        .map(|(_, t)| t)
        .collect();
    assert!(notes.last().unwrap().contains("session/load"), "{notes:?}");
}

/// Two conversations with the SDK agent numbering its sessions per process (`s-1`, `s-2`, …)
/// and unable to load them; its runtime is killed and restarted in between. The restarted
/// runtime hands out `s-1` again: a stored id must not count as open in it.
#[test]
fn replies_do_not_cross_between_conversations_after_a_runtime_restart() {
    let agent = crate::common::sdk_echo_agent();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{}\"], env: {{SDK_ECHO_SEQUENTIAL: \"1\"}}}}\n",
        agent.display()
    );
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: sdk, match: {channel: slack}}\n";
    let up = Up::start_config(&agents, channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    let ready_pid = |s: &Value| {
        Up::runtime(s, "sdk")
            .filter(|r| r["status"] == "ready")
            .and_then(|r| r["pid"].as_u64())
    };
    let status = up.wait_for("the SDK agent ready", |s| ready_pid(s).is_some());
    let pid = ready_pid(&status).unwrap();

    let (_, a1) = inbound(up.addr, SECRET, &slack_group("alice", "a-1", "from alice"));
    let (_, b1) = inbound(up.addr, SECRET, &slack_group("bob", "b-1", "from bob"));
    assert_eq!(a1["reply"]["text"], "echo: from alice (turn 1)", "{a1}");
    assert_eq!(b1["reply"]["text"], "echo: from bob (turn 1)", "{b1}");
    let (alice, bob) = (
        a1["sessionKey"].as_str().unwrap(),
        b1["sessionKey"].as_str().unwrap(),
    );
    assert_eq!(
        (
            runtime_session(&up.state, alice),
            runtime_session(&up.state, bob)
        ),
        ("s-1".to_string(), "s-2".to_string())
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    up.wait_for("the SDK agent restarted", |s| {
        ready_pid(s).is_some_and(|p| p != pid)
    });

    // Bob first: the new process gives him `s-1`, Alice's id in the old one.
    let (_, b2) = inbound(up.addr, SECRET, &slack_group("bob", "b-2", "bob again"));
    let (_, a2) = inbound(up.addr, SECRET, &slack_group("alice", "a-2", "alice again"));
    for (reply, own, other) in [(&b2, "from bob", "alice"), (&a2, "from alice", "bob")] {
        let text = reply["reply"]["text"].as_str().unwrap();
        assert!(
            text.contains(own) && !text.contains(other) && text.ends_with("(turn 1)"),
            "each conversation gets a new session of its own, with its own turns: {text}"
        );
    }
    assert_ne!(
        runtime_session(&up.state, alice),
        runtime_session(&up.state, bob)
    );
}

/// Platform message ids are unique per conversation only: message 42 of one chat is not
/// message 42 of another.
#[test]
fn the_same_message_id_in_two_chats_is_two_messages() {
    let up = sdk_up(|_| {});
    let (status, first) = inbound(up.addr, SECRET, &slack_group("chat-a", "42", "to chat a"));
    assert_eq!(status, 200, "{first}");
    let (status, second) = inbound(up.addr, SECRET, &slack_group("chat-b", "42", "to chat b"));
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["duplicate"], false, "{second}");
    assert_eq!(second["reply"]["text"], "echo: to chat b (turn 1)");
    assert_ne!(second["sessionKey"], first["sessionKey"]);

    // A thread of chat a is another conversation too; chat a itself still deduplicates.
    let mut threaded = slack("chat-a", "42", "in a thread");
    threaded["threadId"] = "t-1".into();
    let (_, third) = inbound(up.addr, SECRET, &threaded);
    assert_eq!(third["duplicate"], false, "{third}");
    assert_eq!(third["reply"]["text"], "echo: in a thread (turn 1)");
    let (_, again) = inbound(up.addr, SECRET, &slack_group("chat-a", "42", "to chat a"));
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["reply"]["text"], "echo: to chat a (turn 1)");
}

/// Telegram and Discord ids are integers past 2^53; as floats, neighbours would share a
/// session. Integers keep their exact decimal text, and a number that cannot be kept exactly
/// is refused instead of rounded.
#[test]
fn numeric_peer_ids_keep_their_exact_decimal_text() {
    let up = sdk_up(|_| {});
    let numeric = |id: &str, message_id: &str| {
        let body = format!(
            r#"{{"channel":"slack","peer":{{"kind":"group","id":{id}}},"messageId":{message_id},"text":"hi"}}"#
        );
        let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
        let (status, _, value) = call(
            up.addr,
            "POST",
            "/v1/inbound",
            &[("x-deepcli-signature", &signature)],
            body.as_bytes(),
        );
        (status, value)
    };
    let (status, low) = numeric("9007199254740992", "7");
    assert_eq!(status, 200, "{low}");
    let (status, high) = numeric("9007199254740993", "7");
    assert_eq!(status, 200, "{high}");
    assert_eq!(high["duplicate"], false, "{high}");
    assert_eq!(
        high["sessionKey"], "agent:sdk:slack:group:9007199254740993",
        "{high}"
    );
    assert_ne!(low["sessionKey"], high["sessionKey"]);

    let (status, refused) = numeric("100000000000000000001", "8");
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("send it as a string"),
        "{refused}"
    );
}

/// Requests run without pause while bindings.yaml is rewritten 10 times a second: none fails,
/// and each is routed entirely by the plan whose generation it names.
#[test]
fn plans_swap_under_load_without_a_failed_or_mixed_request() {
    let agents = "agents:\n  list:\n    - id: main\n    - id: a\n    - id: b\n";
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    // Plan A sends the peer to `a` by its binding at line 2, plan B to `b` at line 3.
    let plan_a =
        "bindings:\n  - {agentId: a, match: {channel: slack, peer: {kind: direct, id: p}}}\n";
    let plan_b = "bindings:\n  - {agentId: main, match: {channel: slack, peer: {kind: direct, id: q}}}\n  - {agentId: b, match: {channel: slack, peer: {kind: direct, id: p}}}\n";
    let up = Up::start_config(agents, channels, plan_a, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the first plan", |s| s["routingGeneration"] == 1);
    // Rewrites every 100 ms until the clients have seen 6 generations served (at most 300
    // rewrites), so a slow machine makes the test longer, not flaky.
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = AtomicBool::new(false);
    let newest = AtomicU64::new(0);
    let (results, rewrites) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0;
            while n < 300 && newest.load(Ordering::SeqCst) < 6 {
                std::thread::sleep(Duration::from_millis(100));
                up.write_by_rename("bindings.yaml", if n % 2 == 0 { plan_b } else { plan_a });
                n += 1;
            }
            stop.store(true, Ordering::SeqCst);
            n
        });
        let clients: Vec<_> = (0..3)
            .map(|c| {
                let (stop, newest, up) = (&stop, &newest, &up);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        i += 1;
                        let message = json!({"channel": "slack", "peer": {"kind": "direct", "id": "p"},
                                             "messageId": format!("{c}-{i}"), "text": "x"});
                        let body = message.to_string();
                        let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
                        let (status, generation, value) = call(
                            up.addr,
                            "POST",
                            "/v1/inbound",
                            &[("x-deepcli-signature", &signature)],
                            body.as_bytes(),
                        );
                        newest.fetch_max(generation.unwrap_or(0), Ordering::SeqCst);
                        seen.push((status, generation, value));
                    }
                    seen
                })
            })
            .collect();
        let results: Vec<_> = clients
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        (results, writer.join().unwrap())
    });
    assert!(
        rewrites < 300,
        "6 generations were not served after 300 rewrites"
    );
    assert!(results.len() > 100, "only {} requests", results.len());
    let mut generations = std::collections::BTreeSet::new();
    for (status, generation, body) in &results {
        assert_eq!(*status, 202, "{body}");
        let generation = generation.expect("every response names its plan");
        generations.insert(generation);
        let route = &body["route"];
        // Generations alternate A (odd) and B (even): the agent and the binding both from it.
        let (agent, line) = if generation % 2 == 1 {
            ("a", 2)
        } else {
            ("b", 3)
        };
        assert_eq!(route["agentId"], agent, "generation {generation}: {route}");
        assert_eq!(
            route["binding"]["line"], line,
            "generation {generation}: {route}"
        );
    }
    assert!(
        generations.len() >= 5,
        "requests saw only generations {generations:?}"
    );
}

#[test]
fn replies_go_to_the_reply_url_signed_or_become_dead_letters() {
    let (url, received) = crate::common::one_request();
    let closed = crate::common::free_addr();
    let agents = crate::common::sdk_agents();
    let channels = open(&format!(
        "channels:\n  slack:\n    accounts:\n      default: {{webhookSecret: {{source: env, id: HOOK}}, replyUrl: \"{url}\"}}\n      gone: {{webhookSecret: {{source: env, id: HOOK}}, replyUrl: \"http://{closed}/nobody\"}}\n"
    ));
    let bindings = "bindings:\n  - {agentId: sdk, match: {channel: slack, accountId: \"*\"}}\n";
    let up = Up::start_config(&agents, &channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the SDK agent ready", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let (status, body) = inbound(up.addr, SECRET, &slack("u9", "r-1", "to the sink"));
    assert_eq!(status, 200, "{body}");
    let (headers, sent) = received.recv_timeout(Duration::from_secs(20)).unwrap();
    let signature = deepcli::sign(SECRET.as_bytes(), sent.as_bytes());
    assert!(
        headers.contains(&format!("x-deepcli-signature: {signature}")),
        "{headers}"
    );
    let sent: Value = serde_json::from_str(&sent).unwrap();
    assert_eq!(sent["reply"]["text"], "echo: to the sink (turn 1)");
    assert_eq!(sent["messageId"], "r-1");
    assert_eq!(sent["sessionKey"], body["sessionKey"]);

    // Nobody listens at the other account's URL: after the retries, a dead letter.
    let mut gone = slack("u9", "r-2", "lost?");
    gone["accountId"] = "gone".into();
    let (status, body) = inbound(up.addr, SECRET, &gone);
    assert_eq!(
        status, 200,
        "the reply is in the response all the same: {body}"
    );
    let db = up.state.join("state.db");
    crate::common::wait_until("the dead letter", || {
        rusqlite::Connection::open(&db)
            .and_then(|c| {
                c.query_row(
                    "SELECT attempts FROM dead_letters WHERE message_id = 'r-2'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .is_ok_and(|attempts| attempts == 4)
    });
    assert_eq!(
        metric(up.addr, &up.state, "deepcli_reply_sink_failures_total"),
        1.0
    );
}

/// `deepcli access serve --plan`: a published plan served on its own, reloaded when a new
/// generation is published, kept when the file turns bad.
#[test]
fn access_serve_serves_a_published_plan_and_follows_its_generations() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, state) = (tmp.path().join("config"), tmp.path().join("state"));
    std::fs::create_dir_all(&config).unwrap();
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    std::fs::write(config.join("channels.yaml"), channels).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        // `ops` runs an ACP agent under `up`; a standalone server runs none.
        "agents:\n  list:\n    - id: main\n    - id: ops\n      runtime: {kind: acp, command: [deepcli, echo-agent]}\n",
    )
    .unwrap();
    let write_bindings = |agent: &str| {
        std::fs::write(
            config.join("bindings.yaml"),
            format!("bindings:\n  - {{agentId: {agent}, match: {{channel: slack}}}}\n"),
        )
        .unwrap();
    };
    let apply = || {
        let out = std::process::Command::new(crate::common::bin())
            .args([
                "--config",
                config.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
            ])
            .args(["apply", "--auto-approve"])
            .env("HOME", tmp.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    write_bindings("ops");
    apply();
    let mut serve = std::process::Command::new(crate::common::bin())
        .args(["--state-dir", state.to_str().unwrap(), "access", "serve"])
        .args(["--plan", state.join("routing-plan.json").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .env("HOOK", SECRET)
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, log) = crate::common::listening_in_log(&mut serve);
    let message = json!({"channel": "slack", "messageId": "s-1", "text": "hi"});
    let agent_of = |id: &str| {
        let mut m = message.clone();
        m["messageId"] = id.into();
        let (status, body) = inbound(addr, SECRET, &m);
        assert_eq!(status, 202, "{body}");
        let note = body["note"].as_str().unwrap();
        assert!(
            note.starts_with("this server runs no runtimes (standalone"),
            "whatever the agent's runtime kind: {note}"
        );
        body["route"]["agentId"].as_str().unwrap().to_string()
    };
    crate::common::wait_until("access serve listening", || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    assert_eq!(agent_of("s-1"), "ops");

    write_bindings("main");
    apply();
    let n = std::cell::Cell::new(1);
    crate::common::wait_until("generation 2 served", || {
        n.set(n.get() + 1);
        agent_of(&format!("s-{}", n.get())) == "main"
    });
    let auth = format!("Bearer {}", token(&state));
    let (_, _, plan) = call(addr, "GET", "/v1/plan", &[("authorization", &auth)], b"");
    assert_eq!(plan["generation"], 2);

    std::fs::write(state.join("routing-plan.json"), "{ broken").unwrap();
    let refused = log
        .iter()
        .find(|line| line.contains("routing plan not reloaded"))
        .unwrap();
    assert!(
        refused.contains("the plan in force keeps serving"),
        "{refused}"
    );
    assert_eq!(
        agent_of("s-last"),
        "main",
        "the plan in force keeps serving"
    );
    let _ = serve.kill();
    let _ = serve.wait();
}

/// `POST /rpc` on the controller: operator token, the management methods, and a write that the
/// controller then applies like any edit.
#[test]
fn operator_json_rpc_edits_the_files_and_the_controller_applies_them() {
    let agents = "agents:\n  list:\n    - id: main\n    - id: ops\n";
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "# who answers what\nbindings: []\n";
    let up = Up::start_config(agents, channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let rpc = |body: Value, auth: Option<&str>| {
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("authorization", b)])
            .unwrap_or_default();
        let (status, _, answer) = call(
            up.addr,
            "POST",
            "/rpc",
            &headers,
            body.to_string().as_bytes(),
        );
        (status, answer)
    };
    let bind = json!({"jsonrpc": "2.0", "id": 1, "method": "_mustang.agent/agents/bind",
                      "params": {"agentId": "ops", "bind": ["slack"]}});
    assert_eq!(rpc(bind.clone(), None).0, 401);
    let token = token(&up.state);
    let (status, answer) = rpc(bind, Some(&token));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], 1);
    assert!(
        answer["result"]["added"]
            .as_array()
            .is_some_and(|a| a.len() == 1),
        "{answer}"
    );
    let text = std::fs::read_to_string(up.config.join("bindings.yaml")).unwrap();
    assert!(
        text.starts_with("# who answers what\n"),
        "the comment survives: {text}"
    );

    up.wait_for("the RPC edit applied", |s| s["routingGeneration"] == 2);
    let (status, routed) = inbound(
        up.addr,
        SECRET,
        &json!({"channel": "slack", "messageId": "r", "text": "x"}),
    );
    assert_eq!(status, 202);
    assert_eq!(routed["route"]["agentId"], "ops");

    // A batch, and an unknown method's standard error.
    let (status, answers) = rpc(
        json!([
            {"jsonrpc": "2.0", "id": "a", "method": "_mustang.agent/agents/list", "params": {}},
            {"jsonrpc": "2.0", "id": "b", "method": "_mustang.agent/agents/nope"}
        ]),
        Some(&token),
    );
    assert_eq!(status, 200);
    assert_eq!(answers[0]["id"], "a", "{answers}");
    let list = &answers[0]["result"];
    assert_eq!(list["defaultAgent"], "main", "{answers}");
    assert_eq!(list["statusSource"], "controller", "{answers}");
    // The listing knows the binding the RPC edit above added.
    let routes: Vec<(&Value, &Value)> = list["agents"]
        .as_array()
        .unwrap_or_else(|| panic!("no agents: {answers}"))
        .iter()
        .map(|a| (&a["id"], &a["routes"]))
        .collect();
    assert_eq!(
        routes,
        [
            (
                &json!("main"),
                &json!(["default (messages no binding matches)"])
            ),
            (&json!("ops"), &json!(["slack"])),
        ],
        "{answers}"
    );
    assert_eq!(answers[1]["error"]["code"], -32601, "{answers}");
}

/// `deepcli up` with two Slack accounts: `default` signs with [`SECRET`], `b`'s secret
/// variable is not set.
fn two_accounts(configure: impl FnOnce(&mut std::process::Command)) -> Up {
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n      b: {webhookSecret: {source: env, id: UNSET_HOOK_VARIABLE}}\n",
    );
    let up = Up::start_config(
        "agents:\n  list:\n    - id: main\n",
        channels,
        "bindings: []\n",
        |cmd| {
            cmd.env("HOOK", SECRET).env_remove("UNSET_HOOK_VARIABLE");
            configure(cmd);
        },
    );
    up.wait_for("the first apply", |s| !s["routingGeneration"].is_null());
    up
}

fn count_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// An unauthenticated caller cannot tell an undeclared account, an account without a usable
/// secret and a wrong signature apart, nor learn where a secret comes from.
#[test]
fn unauthenticated_callers_cannot_tell_accounts_apart() {
    let up = two_accounts(|_| {});
    let message = |account: &str| {
        json!({"channel": "slack", "accountId": account, "peer": {"kind": "group", "id": "c1"},
               "messageId": "m-1", "text": "hi"})
    };
    let answers: Vec<(u16, Value)> = ["default", "b", "nosuch"]
        .iter()
        .map(|account| inbound(up.addr, "a guess", &message(account)))
        .collect();
    assert_eq!(answers[0].0, 401);
    assert!(
        answers.iter().all(|a| a == &answers[0]),
        "all alike: {answers:?}"
    );
    let said = answers[0].1.to_string();
    for secret_detail in ["UNSET_HOOK_VARIABLE", "HOOK", "webhookSecret`", "nosuch"] {
        assert!(!said.contains(secret_detail), "{said}");
    }
    // Signed with the right secret, `b` is still refused alike: it takes no messages.
    let (status, b) = inbound(up.addr, SECRET, &message("b"));
    assert_eq!((status, &b), (401, &answers[0].1));
    // The operator's log tells them apart.
    let log = std::fs::read_to_string(up.state.join("logs/channels/slack.log")).unwrap();
    assert!(
        log.contains("wrong `X-Deepcli-Signature` for channel account `slack/default`"),
        "{log}"
    );
    assert!(
        log.contains("`slack/b` takes no messages") && log.contains("UNSET_HOOK_VARIABLE"),
        "{log}"
    );
    assert!(
        log.contains("unknown channel account `slack/nosuch`"),
        "{log}"
    );
}

/// Callers choose channel names: 500 calls naming 500 channels open no file and hold no
/// descriptor each; their lines go to one size-capped log.
#[test]
fn junk_channel_names_open_no_files() {
    let up = two_accounts(|_| {});
    let pid = up.child.id();
    let (status, _) = inbound(up.addr, "x", &slack_group("c", "warm-up", "x"));
    assert_eq!(status, 401);
    let before = count_fds(pid);
    for i in 0..500 {
        let junk = json!({"channel": format!("junk{i}"), "messageId": "m", "text": "x"});
        let (status, _) = inbound(up.addr, "x", &junk);
        assert_eq!(status, 401);
    }
    let files: Vec<String> = std::fs::read_dir(up.state.join("logs/channels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["slack.log"], "only declared channels get a log");
    let log = std::fs::read_to_string(up.state.join("logs/access.log")).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.contains("channel=junk")).count(),
        500
    );
    let after = count_fds(pid);
    assert!(
        after < before + 20,
        "descriptors: {before} before, {after} after"
    );
}

/// Nothing a caller sends can start a line of its own in a log.
#[test]
fn log_lines_cannot_be_forged() {
    let up = two_accounts(|_| {});
    let forged = "\n2026-01-01T00:00:00Z 200 account=a session=forged";
    for body in [
        json!({"channel": format!("slack{forged}"), "messageId": "m", "text": "x"}),
        json!({"channel": "slack", "accountId": format!("b{forged}"), "messageId": "m", "text": "x"}),
        json!({"channel": "slack", format!("field{forged}"): 1, "messageId": "m", "text": "x"}),
    ] {
        let (status, _) = inbound(up.addr, SECRET, &body);
        assert!(status == 401 || status == 400, "{status}");
    }
    for log in ["logs/access.log", "logs/channels/slack.log"] {
        let Ok(text) = std::fs::read_to_string(up.state.join(log)) else {
            continue;
        };
        for line in text.lines() {
            assert!(
                !line.contains("session=forged") || line.contains("\\n2026"),
                "{log}: {line}"
            );
            assert!(
                !line.starts_with("2026-01-01"),
                "{log}: a forged line: {line}"
            );
        }
    }
}

/// Connections that send nothing, stop half-way through their headers or sit idle after a
/// request are closed after `--idle-timeout-ms`; they do not hold descriptors forever.
#[test]
fn idle_and_slow_connections_are_closed() {
    use std::io::{Read, Write};
    let up = two_accounts(|cmd| {
        cmd.args(["--idle-timeout-ms", "300"]);
    });
    let pid = up.child.id();
    let before = count_fds(pid);
    let mut connections: Vec<std::net::TcpStream> = (0..100)
        .map(|_| std::net::TcpStream::connect(up.addr).unwrap())
        .collect();
    connections[0]
        .write_all(b"POST /v1/inbound HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    connections[1]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    for (i, c) in connections.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        // Ends when the server closes the connection (EOF); a read timeout fails the test.
        let read = c.read_to_end(&mut buf);
        assert!(read.is_ok(), "connection {i} was not closed: {read:?}");
        if i == 1 {
            assert!(
                String::from_utf8_lossy(&buf).contains("200 OK"),
                "answered, then closed when idle"
            );
        }
    }
    crate::common::wait_until("the descriptors given back", || {
        count_fds(pid) <= before + 2
    });
}

/// A connection that has sent nothing yet (neither a request nor HTTP/2's preface) does not
/// hold up the stop: with an idle timeout past `terminate`'s 30 s, waiting for it would fail.
#[test]
fn a_silent_connection_does_not_hold_up_the_stop() {
    let mut up = two_accounts(|cmd| {
        cmd.args(["--idle-timeout-ms", "120000"]);
    });
    use std::io::{Read, Write};
    let _silent = std::net::TcpStream::connect(up.addr).unwrap();
    // Taken by the server: a request on a later connection is answered.
    let mut asked = std::net::TcpStream::connect(up.addr).unwrap();
    asked
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    asked.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(up.terminate().success());
}

/// With `--queue-limit 2`, two messages wait behind the one being answered and the next is
/// refused: the limit is the number that may wait, not one more.
#[test]
fn the_queue_limit_is_the_number_that_may_wait() {
    let up = sdk_up(|cmd| {
        cmd.args(["--queue-limit", "2", "--prompt-timeout-ms", "8000"]);
    });
    let waiting = || metric(up.addr, &up.state, "deepcli_access_waiting_messages");
    std::thread::scope(|s| {
        let first = s.spawn(|| inbound(up.addr, SECRET, &slack_group("q", "q-0", "slow")));
        crate::common::wait_until("the slow prompt to hold the session", || {
            session_opened(&up.state, "agent:sdk:slack:group:q")
        });
        let waiters: Vec<_> = (1..=2)
            .map(|i| {
                let message = slack_group("q", &format!("q-{i}"), &format!("waits {i}"));
                s.spawn(move || inbound(up.addr, SECRET, &message))
            })
            .collect();
        crate::common::wait_until("two messages waiting", || waiting() == 2.0);
        let (status, refused) = inbound(up.addr, SECRET, &slack_group("q", "q-3", "one more"));
        assert_eq!(status, 429, "{refused}");
        assert_eq!(refused["sessionKey"], "agent:sdk:slack:group:q");
        let (status, _) = first.join().unwrap();
        assert_eq!(status, 504, "the slow prompt timed out");
        for waiter in waiters {
            let (status, body) = waiter.join().unwrap();
            assert_eq!(status, 200, "{body}");
        }
    });
}

/// A message whose prompt the SDK agent holds until `release` exists: the session stays busy
/// for as long as the test wants, and no longer.
fn hold(peer: &str, message_id: &str, release: &Path) -> Value {
    slack_group(peer, message_id, &format!("hold {}", release.display()))
}

/// The (inbound, agent) turns of a session, in transcript order, which must alternate: each
/// reply right after its message.
fn exchanges(state: &Path, session_key: &str) -> Vec<(String, String)> {
    let turns: Vec<(String, String)> = transcript(state, session_key)
        .into_iter()
        .filter(|(p, _)| p != "acp")
        .collect();
    turns
        .chunks(2)
        .map(|pair| match pair {
            [(p1, said), (p2, reply)] if p1 == "inbound" && p2 == "agent" => {
                (said.clone(), reply.clone())
            }
            _ => panic!("turns do not alternate message, reply: {turns:?}"),
        })
        .collect()
}

/// Issue 24: per session key, messages are answered one at a time in the order they arrived.
/// The order of arrival is made known: while a held prompt keeps the session busy, each
/// message is sent only once the one before it is seen waiting (the
/// `deepcli_access_waiting_messages` gauge); then the hold is released. The agent's turns, the
/// replies and the transcript all follow that order.
#[test]
fn messages_to_one_session_are_answered_in_arrival_order() {
    let up = sdk_up(|_| {});
    // Inside the agent's workspace: its sandbox sees nothing else of the test's directory.
    let release = up.state.join("workspaces/sdk/release");
    let waiting = || metric(up.addr, &up.state, "deepcli_access_waiting_messages");
    let n = 8;
    let (held, answers) = std::thread::scope(|s| {
        let held = s.spawn(|| inbound(up.addr, SECRET, &hold("fifo", "f-0", &release)));
        crate::common::wait_until("the held prompt to hold the session", || {
            session_opened(&up.state, "agent:sdk:slack:group:fifo")
        });
        let mut answers = Vec::new();
        for i in 1..=n {
            let message = slack_group("fifo", &format!("f-{i}"), &format!("message {i}"));
            answers.push(s.spawn(move || inbound(up.addr, SECRET, &message)));
            crate::common::wait_until(&format!("message {i} waiting"), || {
                waiting() == f64::from(i)
            });
        }
        std::fs::write(&release, "").unwrap();
        let answers: Vec<(u16, Value)> = answers.into_iter().map(|h| h.join().unwrap()).collect();
        (held.join().unwrap(), answers)
    });
    assert_eq!(held.0, 200, "{}", held.1);
    for (i, (status, body)) in (1..=n).zip(&answers) {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(
            body["reply"]["text"],
            format!("echo: message {i} (turn {})", i + 1),
            "the agent saw message {i} as its turn {}",
            i + 1
        );
    }
    let said: Vec<String> = exchanges(&up.state, "agent:sdk:slack:group:fifo")
        .into_iter()
        .map(|(said, _)| said)
        .collect();
    let mut want = vec![format!("hold {}", release.display())];
    want.extend((1..=n).map(|i| format!("message {i}")));
    assert_eq!(said, want, "the transcript's order");
    assert_eq!(waiting(), 0.0);
}

/// Issue 24: messages sent to one session at the same moment (released together by a
/// barrier) while it is busy all wait — the gauge shows every one of them waiting at once, so
/// they really overlap — and are then answered one at a time: each reply is its own message's
/// whole echo (two prompts in one session at once would mix their chunks), the agent's turns
/// are one each, and the transcript has each reply right after its message, in turn order.
#[test]
fn concurrent_messages_to_one_session_are_answered_one_at_a_time() {
    let up = sdk_up(|_| {});
    // Inside the agent's workspace: its sandbox sees nothing else of the test's directory.
    let release = up.state.join("workspaces/sdk/release");
    let waiting = || metric(up.addr, &up.state, "deepcli_access_waiting_messages");
    let n: u32 = 8;
    let barrier = std::sync::Barrier::new(n as usize);
    let (held, answers) = std::thread::scope(|s| {
        let held = s.spawn(|| inbound(up.addr, SECRET, &hold("burst", "b-0", &release)));
        crate::common::wait_until("the held prompt to hold the session", || {
            session_opened(&up.state, "agent:sdk:slack:group:burst")
        });
        let answers: Vec<_> = (1..=n)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    let message = slack_group("burst", &format!("b-{i}"), &format!("burst {i}"));
                    barrier.wait();
                    inbound(up.addr, SECRET, &message)
                })
            })
            .collect();
        crate::common::wait_until("every message waiting at once", || {
            waiting() == f64::from(n)
        });
        std::fs::write(&release, "").unwrap();
        let answers: Vec<(u16, Value)> = answers.into_iter().map(|h| h.join().unwrap()).collect();
        (held.join().unwrap(), answers)
    });
    assert_eq!(held.0, 200, "{}", held.1);
    let mut turns = Vec::new();
    for (i, (status, body)) in (1..=n).zip(&answers) {
        assert_eq!(*status, 200, "{body}");
        let text = body["reply"]["text"].as_str().unwrap();
        let turn = text
            .strip_prefix(&format!("echo: burst {i} (turn "))
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|t| t.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("message {i}'s reply is not its own echo: {text}"));
        turns.push(turn);
    }
    let mut sorted = turns.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (2..=n + 1).collect::<Vec<_>>(),
        "one turn each: {turns:?}"
    );
    let exchanges = exchanges(&up.state, "agent:sdk:slack:group:burst");
    assert_eq!(exchanges.len(), n as usize + 1, "{exchanges:?}");
    for (k, (said, reply)) in exchanges.iter().enumerate().skip(1) {
        assert_eq!(
            reply,
            &format!("echo: {said} (turn {})", k + 1),
            "the transcript's turn {}",
            k + 1
        );
    }
}

/// A caller that hangs up while its message is being answered does not cancel the delivery
/// half-way: a redelivery gets the first delivery's outcome, not an error.
#[test]
fn a_caller_that_hangs_up_does_not_strand_its_delivery() {
    use std::io::Write;
    let up = sdk_up(|cmd| {
        cmd.args(["--prompt-timeout-ms", "2000"]);
    });
    let body = slack_group("h", "hang-1", "slow").to_string();
    let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
    let mut stream = std::net::TcpStream::connect(up.addr).unwrap();
    write!(
        stream,
        "POST /v1/inbound HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Deepcli-Signature: {signature}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    crate::common::wait_until("the prompt to reach the agent", || {
        session_opened(&up.state, "agent:sdk:slack:group:h")
    });
    drop(stream);
    let (status, again) = inbound(up.addr, SECRET, &slack_group("h", "hang-1", "slow"));
    assert_eq!(status, 504, "the first delivery's outcome: {again}");
    assert_eq!(again["cancelled"], true, "{again}");
}

/// Every refusal is JSON, unknown paths and methods too; a misspelt field is named as unknown
/// (with what it was probably meant to be) beside the field it leaves missing, and the valid
/// fields are all listed.
#[test]
fn refusals_are_json_and_name_every_wrong_field() {
    let up = two_accounts(|_| {});
    let (status, _, body) = call(up.addr, "GET", "/v1/nothing-here", &[], b"");
    assert_eq!(status, 404);
    assert!(
        body["error"].as_str().unwrap().contains("/v1/nothing-here"),
        "{body}"
    );
    let (status, _, body) = call(up.addr, "GET", "/v1/inbound", &[], b"");
    assert_eq!(status, 405);
    assert!(body["error"].as_str().unwrap().contains("GET"), "{body}");

    let typo = json!({"channel": "slack", "messageId": "m", "txt": "hello"});
    let (status, body) = inbound(up.addr, SECRET, &typo);
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("unknown field `txt` (did you mean `text`?)")
            && error.contains("missing field `text`"),
        "{error}"
    );
    for field in [
        "threadId",
        "messageId",
        "sender",
        "text",
        "peer",
        "groupScope",
    ] {
        assert!(
            error.contains(&format!("`{field}`")),
            "{field} listed: {error}"
        );
    }
    assert_eq!(body["field"], "txt");
}

/// The README's second terminal: with nothing but `deepcli up` on the quickstart running (no
/// webhook secret set anywhere), `deepcli inbound send` reaches the echo agent through the
/// controller and prints its reply. Without a controller it says how to start one.
#[test]
fn inbound_send_reaches_the_agent_through_the_running_controller() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let up = Up::start_config(
        &read("agents.yaml"),
        &read("channels.yaml"),
        &read("bindings.yaml"),
        |cmd| {
            cmd.env_remove("DEEPCLI_WEBHOOK_SECRET");
        },
    );
    up.wait_for("research ready", |s| {
        Up::runtime(s, "research").is_some_and(|r| r["status"] == "ready")
    });
    // The quickstart as it ships is healthy: nothing it references is missing.
    let status = std::process::Command::new(crate::common::bin())
        .args(["--state-dir", up.state.to_str().unwrap(), "status"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && stdout.starts_with("health       healthy"),
        "{stdout}"
    );
    let send = |state: &Path, args: &[&str]| {
        std::process::Command::new(crate::common::bin())
            .args(["--state-dir", state.to_str().unwrap(), "inbound", "send"])
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("DEEPCLI_OPERATOR_TOKEN")
            .output()
            .unwrap()
    };
    // The quickstart's group answers its allowed sender when mentioned (requireMention):
    // unmentioned, the message is gated, exit 1, and kept as context.
    let group = ["--channel", "telegram", "--peer", "group:-1001234567890"];
    let out = send(
        &up.state,
        &[&group[..], &["--sender", "111111111", "hello there"]].concat(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("not delivered: not-mentioned (decided by channels.telegram.accounts.default.requireMention (channels.yaml:"),
        "{stdout}"
    );
    // As the README sends it: mentioned by name.
    let out = send(
        &up.state,
        &[&group[..], &["--sender", "111111111", "@Research hello"]].concat(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("agent research"), "{stdout}");
    assert!(stdout.contains("echo: "), "{stdout}");
    assert!(
        stdout.contains("111111111: hello there"),
        "the kept message as context: {stdout}"
    );
    assert!(stdout.ends_with("@Research hello\n"), "{stdout}");
    // By id: --mention the bot.
    let out = send(
        &up.state,
        &[
            &group[..],
            &[
                "--sender",
                "111111111",
                "--mention",
                "7000000001",
                "hi again",
            ],
        ]
        .concat(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("echo: hi again"), "{stdout}");
    // The command line is the operator's own channel, declared without accounts, and main
    // answers on it.
    let out = send(&up.state, &["--channel", "cli", "hello main"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("agent main")
            && stdout.ends_with("echo: hello main\n"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An undeclared channel is refused as the API refuses it: exit 1, the reason said.
    let out = send(&up.state, &["--channel", "telegarm", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown channel account `telegarm/default`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let nowhere = tempfile::tempdir().unwrap();
    let out = send(nowhere.path(), &["--channel", "telegram", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("deepcli up"));
}

/// `channels status` while a controller runs reports what the controller sees: credentials in
/// its environment (not the shell's), and whether each account takes signed messages.
#[test]
fn channels_status_asks_the_running_controller() {
    let up = two_accounts(|_| {});
    let out = std::process::Command::new(crate::common::bin())
        .args(["--config", up.config.to_str().unwrap()])
        .args(["--state-dir", up.state.to_str().unwrap()])
        .args(["channels", "status", "--json"])
        .env_remove("HOOK")
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .output()
        .unwrap();
    // Account b misses its credential where the controller runs: the command fails for it.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["statusSource"], "controller", "{status:#}");
    let account = |id: &str| {
        status["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["account"] == id)
            .unwrap()
            .clone()
    };
    let default = account("default");
    assert_eq!(
        default["configured"], true,
        "HOOK is set where the controller runs: {default:#}"
    );
    assert_eq!(default["live"]["inbound"], "open", "{default:#}");
    let b = account("b");
    assert_eq!(b["configured"], false, "{b:#}");
    assert_eq!(b["live"]["inbound"], "closed", "{b:#}");
    assert!(
        b["live"]["reason"]
            .as_str()
            .unwrap()
            .contains("UNSET_HOOK_VARIABLE"),
        "{b:#}"
    );
}

/// The system section (conversations.md, "What the agent is told"): a new session's first
/// prompt begins with it (identity, the bootstrap files cut at `bootstrapMaxChars`, the first
/// run's BOOTSTRAP.md, date and time, the Hub's tools and policy, the reply tags); the next turn
/// of that session gets none, until a file changes; `sessions show --prompt` prints what was
/// given. A symlink the agent put in its workspace is not followed.
#[test]
fn the_agent_is_told_its_system_section_and_again_when_it_changes() {
    let agents = crate::common::sdk_agents().replace(
        "    - id: sdk\n",
        "    - id: sdk\n      bootstrapMaxChars: 300\n      identity: {name: Sidekick, description: echoes what it is told}\n",
    );
    let channels = &open(
        "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
    );
    let bindings = "bindings:\n  - {agentId: sdk, match: {channel: slack}}\n";
    let up = Up::start_config(&agents, channels, bindings, |cmd| {
        cmd.env("HOOK", SECRET);
    });
    up.wait_for("the SDK agent ready", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let workspace = up.state.join("workspaces/sdk");
    let system = |room: &str, id: &str| -> String {
        let (status, answer) = inbound(up.addr, SECRET, &slack_group(room, id, "system"));
        assert_eq!(status, 200, "{answer:#}");
        let reply = answer["reply"]["text"].as_str().unwrap();
        reply.strip_prefix("system: ").unwrap().to_string()
    };

    let first = system("room", "m-1");
    for part in [
        "[deepcli: system section.",
        "# Identity\nYou are the agent `sdk`, named Sidekick, of a deepcli hub of agents.\nWhat you are for: echoes what it is told\n",
        "## AGENTS.md\n",
        "[... cut: AGENTS.md has ",
        "more than bootstrapMaxChars 300; the first 210 and the last 60 are given.",
        "## BOOTSTRAP.md (your first session only",
        "# Date and time\n",
        "# Hub\nThe hub's MCP server `deepcli` gives your sessions its tools: agents_list,",
        "sessions_send may reach these other agents: main.",
        "(permissions.mode: ask), a person decides",
        "- `NO_REPLY`: nothing is posted to the chat.",
    ] {
        assert!(first.contains(part), "no {part:?} in:\n{first}");
    }
    assert!(
        first.ends_with("[deepcli: end of the system section]"),
        "{first}"
    );
    // The same session's next turn: nothing changed, nothing given.
    assert_eq!(system("room", "m-2"), "(none)");

    // An edit reaches the open session at its next turn, with a line in its transcript.
    std::fs::write(workspace.join("IDENTITY.md"), "- Name: Grace\n").unwrap();
    let again = system("room", "m-3");
    assert!(again.contains("## IDENTITY.md\n- Name: Grace\n"), "{again}");
    let key = "agent:sdk:slack:group:room";
    assert!(
        transcript(&up.state, key)
            .iter()
            .any(|(p, t)| p == "acp" && t.starts_with("system section given again: it changed")),
        "{:?}",
        transcript(&up.state, key)
    );
    let shown = up.deepcli(&["sessions", "show", key, "--prompt", "--json"]);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["systemSection"]["text"], again.as_str());
    assert!(
        shown["systemSection"]["hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let human = up.deepcli(&["sessions", "show", key, "--prompt"]);
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(human.starts_with("# given "), "{human}");
    assert!(human.contains("- Name: Grace"), "{human}");
    let plain = up.deepcli(&["sessions", "show", key, "--json"]);
    let plain: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert_eq!(plain.get("systemSection"), None, "{plain:#}");

    // Another conversation's new session: both edits, and no first run.
    std::fs::write(workspace.join("AGENTS.md"), "Answer in haiku.\n").unwrap();
    let other = system("other-room", "m-4");
    assert!(other.contains("- Name: Grace"), "{other}");
    assert!(
        other.contains("## AGENTS.md\nAnswer in haiku.\n## SOUL.md"),
        "{other}"
    );
    assert!(!other.contains("BOOTSTRAP.md"), "{other}");

    // A link to the controller's operator token is not followed.
    std::fs::remove_file(workspace.join("USER.md")).unwrap();
    std::os::unix::fs::symlink(up.state.join("operator-token"), workspace.join("USER.md")).unwrap();
    let linked = system("room", "m-5");
    assert!(
        linked.contains("## USER.md\n[not given: it is a symbolic link"),
        "{linked}"
    );
    assert!(!linked.contains(&token(&up.state)), "{linked}");
}

/// The quickstart with its state in PostgreSQL (`DEEPCLI_STATE_URL`, docs/scale-out.md): the
/// same turns answered and recorded there, not in a state.db; a redelivery answered from
/// there; the CLI reading the same URL; a restarted controller going on with the session.
#[test]
fn the_quickstart_runs_on_a_postgres_state() {
    let schema = PgSchema::new();
    let mut up = quickstart_on(Some(schema), |agents| agents, |_| {});
    let research = "-1001234567890";
    let (status, first) = inbound(up.addr, SECRET, &envelope(group(research), "m-1", "hello"));
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(first["reply"]["text"], "echo: hello");
    let key = first["sessionKey"].as_str().unwrap().to_string();
    let (status, again) = inbound(up.addr, SECRET, &envelope(group(research), "m-1", "hello"));
    assert_eq!(status, 200, "{again:#}");
    assert_eq!(again["duplicate"], true, "{again:#}");
    assert_eq!(again["reply"]["text"], "echo: hello");
    assert!(
        !up.state.join("state.db").exists(),
        "the state went to the directory's state.db"
    );
    let lines = |up: &Up| {
        let sql = format!(
            "SELECT count(*) FROM transcript WHERE session_key = '{key}' AND provenance <> 'acp'"
        );
        up.postgres.as_ref().unwrap().query(&sql)
    };
    assert_eq!(lines(&up).as_deref(), Some("2"));

    // The CLI reads the same state through the same URL.
    let read = |args: &[&str]| -> Value {
        let out = up.deepcli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let history = read(&["sessions", "history", &key, "--json"]);
    let said: Vec<&str> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["provenance"] != "acp")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(said, ["hello", "echo: hello"]);
    let audit = read(&["audit", "--json"]);
    assert!(
        audit["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "inbound" && e["sessions"][0] == key.as_str()),
        "{audit:#}"
    );
    // A backup of a state.db is refused, saying what backs up a PostgreSQL state.
    let out = up.deepcli(&["state", "backup", "copy.db"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pg_dump"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Stopped and started again: the same session, where it was.
    assert!(up.terminate().success());
    up.restart(|cmd| {
        cmd.env("DEEPCLI_WEBHOOK_SECRET", SECRET);
    });
    up.wait_for("research ready", |s| {
        Up::runtime(s, "research").is_some_and(|r| r["status"] == "ready")
    });
    let (status, next) = inbound(up.addr, SECRET, &envelope(group(research), "m-2", "again"));
    assert_eq!(status, 200, "{next:#}");
    assert_eq!(next["sessionKey"], key.as_str());
    // The demo agent's sessions died with it: the session's transcript, read back from
    // PostgreSQL, is given to the new one.
    let reply = next["reply"]["text"].as_str().unwrap();
    assert!(
        reply.contains("user: hello\nagent: echo: hello\n") && reply.ends_with("\nagain"),
        "{reply}"
    );
    assert_eq!(lines(&up).as_deref(), Some("4"));
}
