//! `deepcli route` end to end: the flag contract, human and JSON output, `--explain`
//! snapshots, batch mode with malformed lines, configs with errors, and saved plans.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use deepcli::config::{self, LoadOptions};
use deepcli::routing::RoutingPlan;
use serde_json::{Value, json};

const FIXTURE: &str = "tests/fixtures/route";

fn deepcli() -> Command {
    let mut cmd = Command::cargo_bin("deepcli").unwrap();
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("HOME", "/home/operator")
        .env("DEEPCLI_STATE_DIR", "/srv/deepcli-state")
        .env_remove("DEEPCLI_CONFIG")
        .env_remove("NO_COLOR");
    cmd
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn route(args: &[&str]) -> Run {
    route_stdin(args, "")
}

fn route_stdin(args: &[&str], stdin: &str) -> Run {
    route_stdin_bytes(args, stdin.as_bytes())
}

fn route_stdin_bytes(args: &[&str], stdin: &[u8]) -> Run {
    let out = deepcli()
        .arg("route")
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn json_route(args: &[&str]) -> Value {
    let mut all = vec!["--config", FIXTURE, "--json"];
    all.extend_from_slice(args);
    let run = route(&all);
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

#[test]
fn human_output_names_agent_session_and_binding() {
    let run = route(&[
        "--config",
        "examples/quickstart",
        "--channel",
        "telegram",
        "--peer",
        "group:-1001234567890",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    assert!(!run.stdout.contains('\x1b'), "no colour when piped");
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn json_has_exactly_the_contract_fields() {
    let v = json_route(&[
        "--channel",
        "telegram",
        "--account",
        "Biz",
        "--peer",
        "dm:111",
    ]);
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "agentId",
            "channel",
            "accountId",
            "sessionKey",
            "mainSessionKey",
            "lastRoutePolicy",
            "matchedBy",
            "dmScope",
            "groupScope",
            "binding"
        ]
    );
    assert_eq!(
        v,
        json!({
            "agentId": "sales",
            "channel": "telegram",
            "accountId": "biz",
            // The binding's dmScope wins; the identity link maps telegram:111 to alice.
            "sessionKey": "agent:sales:telegram:biz:direct:alice",
            "mainSessionKey": "agent:sales:main",
            "lastRoutePolicy": "session",
            "matchedBy": "binding.account",
            "dmScope": "per-account-channel-peer",
            "groupScope": "per-group",
            "binding": {"file": "tests/fixtures/route/bindings.yaml", "line": 18, "index": 5}
        })
    );
}

#[test]
fn peer_ids_split_at_the_first_colon() {
    let v = json_route(&["--channel", "slack", "--peer", "channel:C0:thread:9"]);
    assert_eq!(v["sessionKey"], "agent:main:slack:channel:c0:thread:9");
    let run = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "slack",
        "--peer",
        "nocolon",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("expected KIND:ID"), "{}", run.stderr);
}

#[test]
fn every_flag_reaches_the_router() {
    let v = json_route(&[
        "--channel",
        "discord",
        "--guild",
        "g1",
        "--role",
        "member",
        "--role",
        "officer",
        "--peer",
        "channel:c-general",
        "--group-scope",
        "main",
    ]);
    assert_eq!(
        (v["agentId"].as_str(), v["matchedBy"].as_str()),
        (Some("raid"), Some("binding.guild+roles"))
    );
    assert_eq!(v["sessionKey"], "agent:raid:main", "--group-scope main");
    let v = json_route(&[
        "--channel",
        "slack",
        "--team",
        "t1",
        "--peer",
        "direct:U1",
        "--dm-scope",
        "per-peer",
    ]);
    assert_eq!(v["agentId"], "ops");
    // The config's per-channel-peer loses to the caller's override.
    assert_eq!(v["sessionKey"], "agent:ops:direct:u1");
    let v = json_route(&[
        "--channel",
        "discord",
        "--guild",
        "g1",
        "--peer",
        "channel:thread-7",
        "--parent-peer",
        "channel:c-mod",
    ]);
    assert_eq!(v["matchedBy"], "binding.peer.parent");
    assert_eq!(v["agentId"], "mods");
}

#[test]
fn explain_roles_miss() {
    let run = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "discord",
        "--guild",
        "g1",
        "--role",
        "member",
        "--peer",
        "channel:c-other",
        "--explain",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn explain_peer_with_guild_is_no_fallback() {
    let run = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "discord",
        "--guild",
        "g2",
        "--peer",
        "channel:c-mod",
        "--explain",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn explain_default_names_the_account_pitfall() {
    let run = route(&[
        "--config",
        "examples/quickstart",
        "--channel",
        "telegram",
        "--account",
        "biz",
        "--peer",
        "direct:+1555",
        "--explain",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn explain_json() {
    let v = json_route(&[
        "--channel",
        "discord",
        "--peer",
        "direct:42",
        "--team",
        "t1",
        "--explain",
    ]);
    insta::assert_json_snapshot!(v);
}

#[test]
fn batch_routes_every_line_and_reports_bad_ones() {
    let input = [
        r#"{"channel":"telegram","accountId":"biz","peer":{"kind":"direct","id":111}}"#,
        "not json",
        "",
        r#"{"channel":"discord","guildId":"g1","memberRoleIds":["raider"],"acountId":"x"}"#,
        r#"{"channel":"discord","guildId":"g1","memberRoleIds":[" raider"],"peer":null}"#,
        r#"{"peer":{"kind":"direct","id":"1"}}"#,
        r#"{"channel":"slack","peer":{"kind":"channel","id":"C1"},"dmScope":"sideways"}"#,
        r#"{"channel":"telegram","parentPeer":{"kind":"group","id":-100},"teamId":null}"#,
    ]
    .join("\n");
    let run = route_stdin(&["--config", FIXTURE, "--batch"], &input);
    assert_eq!(run.code, 1, "a bad line makes the exit code 1");
    assert!(
        run.stderr.contains("4 of 8 lines were not route inputs"),
        "{}",
        run.stderr
    );
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7, "one output per non-blank input line");
    let errors: Vec<u64> = lines.iter().filter_map(|l| l["line"].as_u64()).collect();
    assert_eq!(errors, [2, 4, 6, 7]);
    assert_eq!(lines[0]["agentId"], "sales");
    assert_eq!(lines[3]["matchedBy"], "binding.guild+roles");
    assert_eq!(lines[6]["agentId"], "support");
    insta::assert_snapshot!(run.stdout);
}

/// One bad line of one was reported as "1 of 1 lines were not route inputs".
#[test]
fn batch_counts_one_bad_line_in_the_singular() {
    let run = route_stdin(&["--config", FIXTURE, "--batch"], "not json\n");
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("1 of 1 line was not a route input"),
        "{}",
        run.stderr
    );
}

/// A large batch is answered in pieces on several threads: in order, with every bad line
/// numbered where it is, as a small one is.
#[test]
fn a_large_batch_is_answered_in_order() {
    let lines = [
        r#"{"channel":"telegram","accountId":"biz","peer":{"kind":"direct","id":111}}"#,
        "not json",
        r#"{"channel":"discord","guildId":"g1","memberRoleIds":["raider"]}"#,
        r#"{"channel":"slack","peer":{"kind":"channel","id":"C1"},"dmScope":"sideways"}"#,
    ];
    let copies = 5000;
    let input = (lines.join("\n") + "\n").repeat(copies);
    let run = route_stdin(&["--config", FIXTURE, "--batch"], &input);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains(&format!("{} of {} lines", 2 * copies, 4 * copies)),
        "{}",
        run.stderr
    );
    let small = route_stdin(
        &["--config", FIXTURE, "--batch"],
        &(lines.join("\n") + "\n"),
    );
    let small: Vec<Value> = small
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let out: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(out.len(), 4 * copies);
    for (i, answer) in out.iter().enumerate() {
        let mut expected = small[i % 4].clone();
        if let Some(line) = expected.get_mut("line") {
            *line = json!(i + 1);
        }
        assert_eq!(answer, &expected, "line {}", i + 1);
    }

    // A line that is not UTF-8 ends the batch there, after the answers before it.
    let mut bytes = input.into_bytes();
    let cut = bytes.len() * 3 / 4;
    let at = cut + bytes[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
    bytes.insert(at, 0xff);
    let line = bytes[..at].iter().filter(|&&b| b == b'\n').count();
    let run = route_stdin_bytes(&["--config", FIXTURE, "--batch"], &bytes);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("valid UTF-8"), "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), line);
}

#[test]
fn batch_output_equals_single_routes() {
    let run = route_stdin(
        &["--config", FIXTURE, "--batch"],
        "{\"channel\":\"discord\",\"guildId\":\"g1\",\"peer\":{\"kind\":\"channel\",\"id\":\"c-mod\"}}\n",
    );
    assert_eq!(run.code, 0);
    let batch: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    let single = json_route(&[
        "--channel",
        "discord",
        "--guild",
        "g1",
        "--peer",
        "channel:c-mod",
    ]);
    assert_eq!(batch, single);
}

#[test]
fn batch_conflicts_with_single_flags() {
    let run = route(&["--config", FIXTURE, "--batch", "--channel", "x"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
}

#[test]
fn a_config_with_errors_is_refused() {
    let run = route(&["--config", "examples/broken", "--channel", "telegram"]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.is_empty(), "stdout carries only results");
    assert!(
        run.stderr.contains("error[unknown-agent]"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("nothing is routed"), "{}", run.stderr);
}

#[test]
fn warnings_go_to_stderr_and_routing_proceeds() {
    let run = route(&[
        "--config",
        "tests/fixtures/rules/legacy-peer-kind/fail",
        "--channel",
        "cli",
        "--peer",
        "direct:alice",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("warning[legacy-peer-kind]"),
        "{}",
        run.stderr
    );
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["matchedBy"], "binding.peer");
}

#[test]
fn undeclared_channels_and_accounts_still_route() {
    let v = json_route(&[
        "--channel",
        "matrix",
        "--account",
        "nowhere",
        "--peer",
        "group:!Room:hs",
    ]);
    assert_eq!(v["agentId"], "main");
    assert_eq!(v["matchedBy"], "default");
    assert_eq!(
        v["sessionKey"], "agent:main:matrix:group:!Room:hs",
        "matrix keeps case"
    );
}

// ---- saved plans ----

fn compiled(dir: &str) -> (RoutingPlan, String) {
    let options = LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = config::load(&root.join(dir), &options).unwrap();
    let hash = loaded.config.sources.hash();
    let plan = RoutingPlan::compile(&loaded.config).expect("a test config fits the routing index");
    (plan, hash)
}

fn write_plan(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

#[test]
fn a_saved_plan_routes_like_the_config() {
    let (plan, hash) = compiled(FIXTURE);
    let doc = plan.to_document(7, &hash);
    let file = write_plan(&doc.to_json());
    let inputs = [
        r#"{"channel":"telegram","accountId":"biz","peer":{"kind":"direct","id":111}}"#,
        r#"{"channel":"discord","guildId":"g1","memberRoleIds":["raider"]}"#,
        r#"{"channel":"discord","guildId":"g2","peer":{"kind":"channel","id":"c-mod"}}"#,
        r#"{"channel":"slack","teamId":"t1"}"#,
        r#"{"channel":"discord","peer":{"kind":"dm","id":"5"}}"#,
    ]
    .join("\n");
    let from_config = route_stdin(&["--config", FIXTURE, "--batch"], &inputs);
    let from_plan = route_stdin(
        &["--plan", file.path().to_str().unwrap(), "--batch"],
        &inputs,
    );
    assert_eq!(from_plan.code, 0, "{}", from_plan.stderr);
    // The saved plan records the binding file by the path it was compiled from.
    let absolute = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(FIXTURE)
        .join("bindings.yaml");
    assert_eq!(
        from_plan.stdout,
        from_config.stdout.replace(
            "tests/fixtures/route/bindings.yaml",
            absolute.to_str().unwrap()
        )
    );
}

#[test]
fn a_plan_of_an_unknown_major_version_is_refused() {
    let (plan, hash) = compiled(FIXTURE);
    let mut doc: Value = serde_json::from_str(&plan.to_document(1, &hash).to_json()).unwrap();
    doc["formatVersion"] = json!("3.0");
    doc["plan"] = json!("a shape this build cannot read");
    let file = write_plan(&doc.to_string());
    let run = route(&["--plan", file.path().to_str().unwrap(), "--channel", "x"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("format 3.0 is newer"), "{}", run.stderr);
}

/// Regression: answers used to wait for stdin to close, so a caller that writes one line and
/// waits for its answer (a co-process) hung.
#[test]
fn batch_answers_each_line_while_stdin_stays_open() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command as Std, Stdio};
    let mut child = Std::new(assert_cmd::cargo::cargo_bin("deepcli"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["route", "--config", FIXTURE, "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let timeout = std::time::Duration::from_secs(30);
    for (input, agent) in [
        (r#"{"channel":"slack","teamId":"t1"}"#, "ops"),
        (r#"{"channel":"slack"}"#, "main"),
    ] {
        writeln!(stdin, "{input}").unwrap();
        stdin.flush().unwrap();
        let answer = rx
            .recv_timeout(timeout)
            .expect("an answer while stdin is still open");
        let v: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["agentId"], agent);
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn an_acp_bound_conversation_is_pointed_out() {
    let run = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "discord",
        "--peer",
        "channel:c-acp",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("binds this conversation to agent `ops`")
            && run.stdout.contains("bindings.yaml:25"),
        "{}",
        run.stdout
    );
    let other = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "discord",
        "--peer",
        "channel:c-other",
    ]);
    assert!(!other.stdout.contains("note:"), "{}", other.stdout);
}

/// Regression: `--channel telegarm` was routed silently (exit 0) while the Access API answers
/// 404 for the same input. It is still routed, with a warning naming the likely fix; `--strict`
/// fails it.
#[test]
fn an_undeclared_channel_or_account_is_routed_with_a_warning() {
    let typo = route(&["--config", FIXTURE, "--channel", "telegarm"]);
    assert_eq!(typo.code, 0, "{}", typo.stderr);
    assert!(
        typo.stdout.contains("channel      telegarm"),
        "{}",
        typo.stdout
    );
    assert_eq!(
        typo.stderr,
        "warning: channel `telegarm` is not declared in channels.yaml: the Access API refuses its messages (404); routed by the bindings all the same\n  hint: did you mean `telegram`?\n"
    );
    let strict = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "telegarm",
        "--strict",
        "--json",
    ]);
    assert_eq!(strict.code, 1, "{}", strict.stderr);
    let answer: Value = serde_json::from_str(&strict.stdout).unwrap();
    assert_eq!(answer["channel"], "telegarm", "the route is still answered");

    let account = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "telegram",
        "--account",
        "work",
    ]);
    assert_eq!(account.code, 0);
    assert_eq!(
        account.stderr,
        "warning: channel `telegram` has no account `work` in channels.yaml: the Access API refuses its messages (404); routed by the bindings all the same\n  hint: `telegram` lists the accounts `biz`, `default`; pass one with --account\n"
    );
    let declared = route(&[
        "--config",
        FIXTURE,
        "--channel",
        "Telegram",
        "--account",
        "BIZ",
        "--strict",
    ]);
    assert_eq!(declared.code, 0, "{}", declared.stderr);
    assert_eq!(declared.stderr, "", "ids are compared normalized");
}

/// A batch warns once, at the end, with each undeclared channel account and its line count:
/// not once per line. `--strict` makes the batch fail.
#[test]
fn a_batch_names_undeclared_channels_once() {
    let lines = "{\"channel\": \"telegarm\"}\n{\"channel\": \"telegram\"}\n{\"channel\": \"telegarm\", \"peer\": {\"kind\": \"direct\", \"id\": \"1\"}}\n{\"channel\": \"telegram\", \"accountId\": \"work\"}\n";
    let run = route_stdin(&["--config", FIXTURE, "--batch"], lines);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 4, "every line is answered");
    assert_eq!(
        run.stderr,
        "warning: 3 of 4 lines went to channel accounts channels.yaml does not declare, whose messages the Access API refuses (404): telegarm (2 lines), telegram/work (1 line)\n"
    );
    let strict = route_stdin(&["--config", FIXTURE, "--batch", "--strict"], lines);
    assert_eq!(strict.code, 1);
    assert_eq!(strict.stdout, run.stdout);
    let clean = route_stdin(
        &["--config", FIXTURE, "--batch", "--strict"],
        "{\"channel\": \"slack\"}\n",
    );
    assert_eq!((clean.code, clean.stderr.as_str()), (0, ""));
}

/// With `--plan`, the plan's accounts section stands for channels.yaml.
#[test]
fn a_published_plan_tells_undeclared_channels_too() {
    let options = LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = config::load(&root.join(FIXTURE), &options).unwrap();
    let mut body = RoutingPlan::compile(&loaded.config).unwrap().to_body();
    body.accounts = deepcli::routing::document::StoredAccount::all_of(&loaded.config);
    let file = write_plan(&body.document_json(1, &body.hash(), "sha256:x"));
    let path = file.path().to_str().unwrap();
    let typo = route(&["--plan", path, "--channel", "telegarm", "--strict"]);
    assert_eq!(typo.code, 1);
    assert!(
        typo.stderr
            .starts_with("warning: channel `telegarm` is not declared in the routing plan"),
        "{}",
        typo.stderr
    );
    let known = route(&[
        "--plan",
        path,
        "--channel",
        "telegram",
        "--account",
        "biz",
        "--strict",
    ]);
    assert_eq!((known.code, known.stderr.as_str()), (0, ""));
}

/// Every deepcli process runs with transparent huge pages off (src/main.rs, docs/controller.md):
/// a batch kept waiting for input is looked at in /proc while it lives.
#[test]
fn a_deepcli_process_runs_without_transparent_huge_pages() {
    use std::io::BufRead as _;
    use std::process::Stdio;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_deepcli"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["route", "--config", FIXTURE, "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"channel\":\"telegram\",\"peer\":{\"kind\":\"direct\",\"id\":\"1\"}}\n")
        .unwrap();
    stdin.flush().unwrap();
    // Its answer says it is up and past its start; it waits for the next line.
    let mut answer = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.contains("\"agentId\""), "{answer}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    drop(stdin);
    child.wait().unwrap();
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .expect("/proc/<pid>/status has THP_enabled (Linux 5.0 and later)");
    assert_eq!(thp.trim(), "0", "{status}");
}

/// An A2A peer routed at the hub's endpoint to an agent `a2a.expose` does not list is refused
/// there (403) before any gate: `--explain` says so, as the server does, not `deliver`.
#[test]
fn explain_says_an_a2a_peer_routed_to_an_unexposed_agent_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n    - id: research\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("channels.yaml"),
        "channels: {}\na2a:\n  expose: [research]\n  peers:\n    partner: {token: {source: env, id: PARTNER_TOKEN}}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("bindings.yaml"), "bindings: []\n").unwrap();
    let config = dir.path().to_str().unwrap();
    let args = |json: bool| {
        let mut a = vec![
            "--config",
            config,
            "--channel",
            "a2a",
            "--peer",
            "direct:partner",
        ];
        a.extend(["--sender", "partner", "--explain"]);
        if json {
            a.push("--json");
        }
        route(&a)
    };
    // Unbound, the peer reaches main, the default agent, which is not exposed.
    let run = args(false);
    assert!(
        run.stdout
            .contains("not-exposed  agent `main` is not in channels.yaml `a2a.expose`"),
        "{}",
        run.stdout
    );
    let json: Value = serde_json::from_str(&args(true).stdout).unwrap();
    assert_eq!(json["gate"]["verdict"], "refused");
    assert_eq!(json["gate"]["reason"], "not-exposed");
    // Bound to research, it is delivered.
    std::fs::write(
        dir.path().join("bindings.yaml"),
        "bindings:\n  - {agentId: research, match: {channel: a2a, peer: {kind: direct, id: partner}}}\n",
    )
    .unwrap();
    let json: Value = serde_json::from_str(&args(true).stdout).unwrap();
    assert_eq!(json["gate"]["verdict"], "deliver", "{json:#}");
}
