//! The web console end to end (console.md): `deepcli up` with two SDK echo agents, and Debian's
//! chromium driven by playwright-core (`tests/peers/console-e2e.mjs`) as the operator. Signs in;
//! watches an inbound message appear live in a transcript, each line with who said it, and a
//! message the inbound policy gated with its gate; finds a
//! line said in another session by its words, and a session by its key; approves a permission on a phone-sized
//! screen, with the keyboard, and the agent's tool call completes; accepts a task; explains a
//! route; signs out. A request without the cookie, with a wrong CSRF token or from another
//! origin is refused, and the JSON API still takes only the bearer token. Screenshots of each
//! page go to target/console-screenshots/ (not committed).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Up, npm_peer, sdk_echo_agent, transcript};
use crate::hub::{ALPHA, agents, hub_up, run_until, say, tool};

/// The headless browser, one command at a time.
struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn chromium() -> PathBuf {
    let path =
        std::env::var_os("CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from);
    assert!(
        path.exists(),
        "no chromium at {}: the console's end-to-end test needs Debian's chromium (`apt-get install -y chromium`, as .ci/run does) or CHROMIUM=<path>",
        path.display()
    );
    path
}

fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots")
}

impl Browser {
    fn open(up: &Up) -> Browser {
        sdk_echo_agent();
        npm_peer("playwright-core");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/console-e2e.mjs");
        let mut child = Command::new("node")
            .arg(script)
            .arg(format!("http://{}", up.addr))
            .arg(screenshots())
            .env("CHROMIUM", chromium())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Browser {
            child,
            stdin,
            stdout,
        }
    }

    /// One command; its answer, or the browser's error.
    fn try_do(&mut self, command: Value) -> Result<Value, String> {
        writeln!(self.stdin, "{command}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("the driver said {line:?}"));
        match answer.get("ok") {
            Some(ok) => Ok(ok.clone()),
            None => Err(answer["error"].as_str().unwrap_or_default().to_string()),
        }
    }

    fn run(&mut self, command: Value) -> Value {
        let shown = command.to_string();
        self.try_do(command)
            .unwrap_or_else(|e| panic!("the browser failed {shown}: {e}"))
    }

    fn goto(&mut self, path: &str) -> Value {
        self.run(json!({"cmd": "goto", "path": path}))
    }

    fn text(&mut self, selector: &str) -> String {
        self.run(json!({"cmd": "text", "selector": selector}))["text"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn shot(&mut self, name: &str) {
        self.run(json!({"cmd": "screenshot", "name": name}));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.try_do(json!({"cmd": "close"}));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request with no cookie, redirects not followed: status and `Location`.
fn bare(up: &Up, method: &str, path: &str, body: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let url = format!("http://{}{path}", up.addr);
    let response = if method == "GET" {
        agent.get(&url).call()
    } else {
        agent
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .send(body)
    }
    .unwrap();
    let location = response
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (response.status().as_u16(), location)
}

/// Speaks `text` into session `key` as the operator (the agent's turn there); the tool's
/// result of an `mcp` line.
fn tool_from(up: &Up, key: &str, tool: &str, args: Value) -> Value {
    let out = up.deepcli(&["sessions", "send", key, &format!("mcp {tool} {args}")]);
    let reply = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let json = reply
        .strip_prefix("mcp: ")
        .unwrap_or_else(|| panic!("the tool call failed: {reply}"));
    serde_json::from_str(json).unwrap()
}

/// Goes to `path` until `selector` is there (something the hub does on its own time).
fn until_shown(browser: &mut Browser, path: &str, selector: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        browser.goto(path);
        let n = browser.run(json!({"cmd": "count", "selector": selector}))["count"]
            .as_u64()
            .unwrap();
        if n > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{selector} never shown on {path}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_operator_signs_in_watches_a_transcript_live_approves_accepts_and_explains_a_route() {
    let alpha_more = "      permissions: {mode: ask, timeoutSeconds: 120}\n";
    let up = hub_up(&agents("", alpha_more, ""), |_| {});
    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();

    // Nothing without a session: a page sends to the login form, an action is refused.
    assert_eq!(
        bare(&up, "GET", "/console/approvals", ""),
        (303, "/console/login".into())
    );
    assert_eq!(bare(&up, "GET", "/", "").0, 303);
    assert_eq!(
        bare(
            &up,
            "POST",
            "/console/approvals/x/decide",
            "verdict=approve"
        )
        .0,
        403
    );
    assert_eq!(bare(&up, "POST", "/console/routes", "channel=slack").0, 403);
    // The token is never a cookie.
    let (status, _) = bare(&up, "POST", "/console/login", "token=wrong");
    assert_eq!(status, 401);

    let mut browser = Browser::open(&up);
    let signed = browser.run(json!({"cmd": "login", "token": token.trim()}));
    assert!(
        signed["url"].as_str().unwrap().ends_with("/console/"),
        "{signed}"
    );
    let cookies = browser.run(json!({"cmd": "cookies"}));
    let cookie = &cookies["cookies"][0];
    assert_eq!(cookie["name"], "deepcli_console", "{cookies}");
    assert_eq!(cookie["httpOnly"], true);
    assert_eq!(cookie["sameSite"], "Strict");
    assert_ne!(cookie["value"], token.trim());
    assert_eq!(cookie["value"].as_str().unwrap().len(), 64);

    // Overview: the agents' runtimes.
    assert!(browser.text("#main").contains("alpha"));
    browser.run(json!({"cmd": "waitText", "selector": "td", "text": "beta"}));
    browser.shot("overview");

    // A conversation, and a message appearing in it live.
    say(&up, "ga", "hello console");
    browser.goto("/console/conversations");
    browser.run(json!({"cmd": "waitText", "selector": "td a", "text": ALPHA}));
    browser.shot("conversations");
    browser.goto(&format!("/console/conversations/session?key={ALPHA}"));
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li", "text": "hello console"}));
    browser.run(json!({"cmd": "waitText", "selector": "#live-state", "text": "Live:"}));
    let before = browser.run(json!({"cmd": "count", "selector": "#transcript li"}))["count"]
        .as_u64()
        .unwrap();
    say(&up, "ga", "a line that arrives live");
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li", "text": "a line that arrives live"}));
    // The message and the agent's answer, without a reload.
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.agent", "text": "a line that arrives live"}));
    let after = browser.run(json!({"cmd": "count", "selector": "#transcript li"}))["count"]
        .as_u64()
        .unwrap();
    assert_eq!(after, before + 2);
    // Who said each line: the person (the envelope's sender id, on its channel), the agent.
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.from-person .who", "text": "u1 on slack"}));
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.from-agent .who", "text": "agent alpha"}));
    // A sender with a name, live.
    let named = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
        "messageId": "console-named", "sender": {"id": "u7", "name": "Ada"},
        "text": "a line from Ada"});
    let (status, answered) =
        crate::common::signed_inbound(up.addr, crate::hub::SECRET.as_bytes(), &named);
    assert_eq!(status, 200, "{answered}");
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.from-person", "text": "Ada (u7) on slack"}));
    // A message the inbound policy gated (another bot's: `allowBots` is off) appears live
    // too, marked with its gate: the agent never saw it.
    let from_bot = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
        "messageId": "console-bot", "sender": {"id": "B9", "name": "Other bot", "isBot": true},
        "text": "a bot talking"});
    let (status, answered) =
        crate::common::signed_inbound(up.addr, crate::hub::SECRET.as_bytes(), &from_bot);
    assert_eq!(answered["gated"]["reason"], "bot", "{status} {answered}");
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.gated .gate", "text": "gated: bot by allowBots"}));
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.gated", "text": "Other bot (B9) [bot] on slack"}));
    browser.run(json!({"cmd": "waitText", "selector": "#transcript li.gated .gate", "text": "the agent never saw it"}));
    browser.shot("transcript-live");

    // A search by words finds a line said in another session, among all of them.
    say(&up, "gb", "the zebracrossing report is late");
    // The search index takes a line within a checkpoint's interval (docs/state.md): searched
    // again until it is there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let found = loop {
        browser.goto("/console/conversations");
        browser.run(json!({"cmd": "fill", "selector": "#text", "value": "zebracross"}));
        let searched = browser
            .run(json!({"cmd": "click", "selector": "button:has-text('Search transcripts')"}));
        assert_eq!(searched["status"], 200, "{searched}");
        let found = browser.text("main");
        if found.contains("agent:beta:slack:group:gb") || std::time::Instant::now() > deadline {
            break browser.text("#found");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(found.contains("agent:beta:slack:group:gb"), "{found}");
    assert!(found.contains("zebracrossing report"), "{found}");
    assert!(!found.contains(ALPHA), "{found}");
    browser.shot("conversations-search");
    // And by key: a real query over every session, not a narrowed page.
    browser.goto("/console/conversations?q=GROUP:GB");
    browser
        .run(json!({"cmd": "waitText", "selector": "td a", "text": "agent:beta:slack:group:gb"}));
    let listed = browser.run(json!({"cmd": "count", "selector": "tbody tr"}));
    assert_eq!(listed["count"], 1, "{listed}");

    // A permission the agent asks for, approved on a phone, with the keyboard.
    let addr = up.addr;
    let asked = std::thread::spawn(move || {
        let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
            "messageId": "console-permission", "sender": {"id": "u1"},
            "text": "permission execute rm -rf build"});
        crate::common::signed_inbound(addr, crate::hub::SECRET.as_bytes(), &envelope)
    });
    browser.run(json!({"cmd": "viewport", "width": 390, "height": 844}));
    until_shown(&mut browser, "/console/approvals", "article.approval");
    let card = browser.text("article.approval");
    assert!(card.contains("rm -rf build"), "{card}");
    assert!(card.contains("sha256:"), "{card}");
    browser.shot("approvals-phone");
    let decided =
        browser.run(json!({"cmd": "press", "selector": "article.approval button[value=approve]"}));
    assert_eq!(decided["status"], 200, "{decided}");
    let (status, answered) = asked.join().unwrap();
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["reply"]["text"], "permission: allow");
    let all = up.deepcli(&["approvals", "list", "--all", "--json"]);
    let all: Value = serde_json::from_slice(&all.stdout).unwrap();
    assert_eq!(all["approvals"][0]["state"], "approved", "{all}");
    assert_eq!(all["approvals"][0]["decidedBy"], "operator", "{all}");
    browser.run(json!({"cmd": "viewport", "width": 1280, "height": 900}));

    // A task that waits for a person, accepted.
    let created = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "rename the flag", "acceptance": "cargo test passes"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let task_key = format!("agent:beta:task:{id}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !transcript(&up.state, &task_key)
        .iter()
        .any(|(_, t)| t.contains("Acceptance"))
    {
        assert!(Instant::now() < deadline, "beta never got the task");
        std::thread::sleep(Duration::from_millis(50));
    }
    let submitted = tool_from(
        &up,
        &task_key,
        "tasks_update",
        json!({"taskId": id, "action": "submit", "text": "renamed"}),
    );
    assert_eq!(submitted["state"], "submitted", "{submitted}");
    let passed = tool(
        &up,
        "tasks_review",
        json!({"taskId": id, "passed": true, "notes": "checked"}),
    );
    assert_eq!(passed["state"], "pending_acceptance", "{passed}");
    until_shown(&mut browser, "/console/approvals", &format!("#task-{id}"));
    browser.shot("tasks-pending");
    let accepted = browser.run(json!({"cmd": "click",
        "selector": format!("#task-{id} form[action$='/accept'] button")}));
    assert_eq!(accepted["status"], 200, "{accepted}");
    let task = tool(&up, "tasks_get", json!({"taskId": id}));
    assert_eq!(task["state"], "accepted", "{task}");

    // Runs and audit, with its export.
    browser.goto("/console/runs");
    browser.run(json!({"cmd": "waitText", "selector": "#main", "text": &id}));
    browser.shot("runs");
    browser.goto("/console/audit?agentId=alpha");
    browser.run(json!({"cmd": "waitText", "selector": "td", "text": "inbound"}));
    browser.shot("audit");

    // A route explained: the binding's file:line.
    browser.goto("/console/routes");
    for (field, value) in [
        ("#channel", "slack"),
        ("#peer_kind", "group"),
        ("#peer", "gb"),
        ("#sender", "u1"),
        ("#text", "hi"),
    ] {
        browser.run(json!({"cmd": "fill", "selector": field, "value": value}));
    }
    let explained = browser.run(json!({"cmd": "click", "selector": "button:has-text('Explain')"}));
    assert_eq!(explained["status"], 200, "{explained}");
    assert_eq!(browser.text("#route-agent"), "beta");
    assert_eq!(browser.text("#route-session"), "agent:beta:slack:group:gb");
    assert_eq!(browser.text("#route-tier"), "binding.peer");
    assert!(browser.text("#route-binding").ends_with("bindings.yaml:2"));
    assert_eq!(browser.text("#route-gate"), "deliver");
    browser.shot("routes");

    // With the cookie but a wrong CSRF token, or from another origin: refused.
    let bad = browser.run(json!({"cmd": "post", "path": "/console/routes",
        "form": {"csrf": "0".repeat(64), "channel": "slack"}}));
    assert_eq!(bad["status"], 403, "{bad}");
    let none = browser.run(json!({"cmd": "post", "path": "/console/approvals/x/decide",
        "form": {"verdict": "approve"}}));
    assert_eq!(none["status"], 403, "{none}");
    let elsewhere = browser.run(json!({"cmd": "post", "path": "/console/logout",
        "form": {}, "origin": "http://evil.example"}));
    assert_eq!(elsewhere["status"], 403, "{elsewhere}");
    // The cookie opens no JSON API: that stays bearer-only.
    let api = browser.run(json!({"cmd": "post", "path": "/v1/route",
        "form": {"channel": "slack"}}));
    assert_eq!(api["status"], 401, "{api}");

    // No script error, nothing the Content-Security-Policy refused.
    let problems = browser.run(json!({"cmd": "problems"}));
    assert_eq!(problems["problems"], json!([]), "{problems}");

    // Signed out: the pages send to the login form again.
    let out = browser.run(json!({"cmd": "click", "selector": "button:has-text('Sign out')"}));
    assert!(
        out["url"].as_str().unwrap().ends_with("/console/login"),
        "{out}"
    );
    let again = browser.goto("/console/approvals");
    assert!(
        again["url"].as_str().unwrap().ends_with("/console/login"),
        "{again}"
    );
}

#[test]
fn a_loop_pause_is_resumed_from_the_runs_page() {
    let up = hub_up(
        &agents(
            "",
            "      budgets: {loopTurns: 2}\n",
            "session:\n  maxPingPongTurns: 0\n",
        ),
        |_| {},
    );
    let send = || {
        tool(
            &up,
            "sessions_send",
            json!({"agentId": "beta", "message": "reply: pong", "timeoutSeconds": 30}),
        )
    };
    for _ in 0..2 {
        assert_eq!(send()["status"], "ok");
    }
    let paused = send();
    assert_eq!(paused["status"], "paused", "{paused}");
    let run_id = paused["runId"].as_str().unwrap().to_string();

    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();
    let mut browser = Browser::open(&up);
    browser.run(json!({"cmd": "login", "token": token.trim()}));
    browser.goto("/console/runs");
    let card = browser.text(&format!("#run-{run_id}"));
    assert!(card.contains("agent:beta:main"), "{card}");
    // In the tree too, with its state.
    browser.run(json!({"cmd": "waitText", "selector": ".tree li", "text": "paused"}));
    browser.shot("runs-loop-pause");
    let resumed = browser.run(json!({"cmd": "click",
        "selector": format!("#run-{run_id} form[action$='/resume'] button")}));
    assert_eq!(resumed["status"], 200, "{resumed}");
    run_until(&up, &run_id, |r| r["state"] == "completed");
    // Resumed once: the pause is gone from the page.
    browser.goto("/console/runs");
    let left = browser.run(json!({"cmd": "count", "selector": format!("#run-{run_id}")}));
    assert_eq!(left["count"], 0, "{left}");
    let problems = browser.run(json!({"cmd": "problems"}));
    assert_eq!(problems["problems"], json!([]), "{problems}");
    drop(browser);

    // `deepcli console` names the running controller's console, and says when none runs.
    let out = up.deepcli(&["console", "--no-open"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("http://{}/console/\n", up.addr)
    );
    let mut up = up;
    up.terminate();
    let out = up.deepcli(&["console", "--no-open"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("start `deepcli up`"),
        "{out:?}"
    );
}
