//! `deepcli agents …` / `channels …` end to end with the real binary on temp copies of
//! `tests/fixtures/manage/hub`: every command's JSON result (snapshot), its exit code, and the
//! files afterwards (snapshots showing comments and formatting kept around the change);
//! conflicts and invalid edits write nothing; an outside edit between read and write is caught;
//! the seed scenario through `apply` and trash; and the JSON-RPC dispatcher answering exactly
//! what the CLI prints, method by method.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use assert_cmd::Command;
use deepcli::config::LoadOptions;
use deepcli::manage::{self, ManageContext, ManageError};
use serde_json::{Value, json};

const FIXTURE: &str = "tests/fixtures/manage/hub";

struct Hub {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self, hub: &Hub) -> Value {
        serde_json::from_str(&hub.scrub(&self.stdout))
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

impl Hub {
    fn new() -> Hub {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let config = root.join("config");
        std::fs::create_dir_all(&config).unwrap();
        for name in ["agents.yaml", "channels.yaml", "bindings.yaml"] {
            std::fs::copy(Path::new(FIXTURE).join(name), config.join(name)).unwrap();
        }
        Hub { _tmp: tmp, root }
    }

    fn config(&self) -> PathBuf {
        self.root.join("config")
    }

    fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.config().join(name)).unwrap()
    }

    fn files(&self) -> [String; 3] {
        ["agents.yaml", "channels.yaml", "bindings.yaml"].map(|n| self.file(n))
    }

    fn scrub(&self, text: &str) -> String {
        text.replace(&self.root.display().to_string(), "[TMP]")
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::cargo_bin("deepcli").unwrap();
        cmd.current_dir(&self.root)
            .env("HOME", self.root.join("home"))
            .env("DEEPCLI_CONFIG", self.config())
            .env("DEEPCLI_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            .env_remove("DEEPCLI_OPERATOR_TOKEN")
            .env_remove("DEEPCLI_MANAGE_EDIT_BEFORE_WRITE")
            .env_remove("DEEPCLI_PROBE_TARGETS")
            .env_remove("TELEGRAM_WORK_TOKEN")
            .env_remove("SLACK_ACME_TOKEN")
            .env_remove("TELEGRAM_BOT_TOKEN")
            .args(args)
            .write_stdin("");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn ctx(&self) -> ManageContext {
        ManageContext::new(
            self.config(),
            LoadOptions {
                state_dir: self.state(),
                home: Some(self.root.join("home")),
            },
        )
    }
}

fn ok(run: &Run) {
    assert_eq!(
        run.code, 0,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
}

// ---- the seed scenario -----------------------------------------------------------------------

#[test]
fn seed_scenario_add_identity_bind_unbind_list_delete_then_apply_trashes_research() {
    let hub = Hub::new();
    let ws = hub.root.join("ws-research");
    let ws = ws.to_str().unwrap();

    let add = hub.run(&["agents", "add", "research", "--workspace", ws, "--json"]);
    ok(&add);
    insta::assert_json_snapshot!("seed_add", add.json(&hub));

    let identity = hub.run(&[
        "agents",
        "set-identity",
        "research",
        "--name",
        "Research",
        "--theme",
        "curious and thorough",
        "--json",
    ]);
    ok(&identity);
    insta::assert_json_snapshot!("seed_set_identity", identity.json(&hub));

    let bind = hub.run(&["agents", "bind", "research", "--bind", "cli", "--json"]);
    ok(&bind);
    insta::assert_json_snapshot!("seed_bind", bind.json(&hub));

    let bindings = hub.run(&["agents", "bindings", "--agent", "research", "--json"]);
    ok(&bindings);
    insta::assert_json_snapshot!("seed_bindings", bindings.json(&hub));

    let unbind = hub.run(&["agents", "unbind", "research", "--all", "--json"]);
    ok(&unbind);
    insta::assert_json_snapshot!("seed_unbind_all", unbind.json(&hub));

    let apply = hub.run(&["apply", "--auto-approve"]);
    ok(&apply);
    let research_ws = PathBuf::from(ws);
    assert!(research_ws.is_dir(), "apply created research's workspace");

    let list = hub.run(&["agents", "list", "--bindings", "--json"]);
    ok(&list);
    insta::assert_json_snapshot!("seed_list", list.json(&hub));

    let delete = hub.run(&["agents", "delete", "research", "--force", "--json"]);
    ok(&delete);
    insta::assert_json_snapshot!("seed_delete", delete.json(&hub));
    let [agents, channels, bindings] = hub.files();
    assert_eq!(
        agents,
        std::fs::read_to_string(Path::new(FIXTURE).join("agents.yaml")).unwrap()
    );
    assert_eq!(
        channels,
        std::fs::read_to_string(Path::new(FIXTURE).join("channels.yaml")).unwrap()
    );
    assert_eq!(
        bindings,
        std::fs::read_to_string(Path::new(FIXTURE).join("bindings.yaml")).unwrap()
    );

    let apply = hub.run(&["apply", "--auto-approve"]);
    ok(&apply);
    assert!(!research_ws.exists(), "research's workspace went to trash");
    let trash = hub.run(&["trash", "list", "--json"]);
    let trash: Value = serde_json::from_str(&trash.stdout).unwrap();
    let text = trash.to_string();
    for path in delete.json(&hub)["trash"].as_array().unwrap() {
        let path = path
            .as_str()
            .unwrap()
            .replace("[TMP]", &hub.root.display().to_string());
        assert!(text.contains(&path), "{path} is in the trash: {text}");
    }
    assert_eq!(delete.json(&hub)["trash"].as_array().unwrap().len(), 3);
    assert!(
        hub.state().join("workspaces/main").is_dir(),
        "main is untouched"
    );
}

// ---- agents ----------------------------------------------------------------------------------

#[test]
fn add_with_binds_keeps_the_files_formatting() {
    let hub = Hub::new();
    let run = hub.run(&[
        "agents",
        "add",
        "Ops Bot",
        "--model",
        "openai/gpt-4.1",
        "--bind",
        "telegram:work",
        "--json",
    ]);
    // telegram:work belongs to helper: a conflict, nothing written.
    assert_eq!(run.code, 1);
    insta::assert_json_snapshot!("add_conflict", run.json(&hub));
    assert_eq!(
        hub.file("agents.yaml"),
        std::fs::read_to_string(Path::new(FIXTURE).join("agents.yaml")).unwrap()
    );

    let run = hub.run(&[
        "agents",
        "add",
        "Ops Bot",
        "--agent-dir",
        "agents/ops",
        "--bind",
        "cli",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("add", run.json(&hub));
    insta::assert_snapshot!("add_agents_yaml", hub.scrub(&hub.file("agents.yaml")));
    insta::assert_snapshot!("add_bindings_yaml", hub.scrub(&hub.file("bindings.yaml")));
    let again = hub.run(&["agents", "add", "ops-bot"]);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
}

#[test]
fn bind_skips_upgrades_and_refuses_conflicts() {
    let hub = Hub::new();
    // main has `{channel: telegram}`: telegram (= telegram:default) is skipped, and a
    // channel-only binding of main upgrades in place when main binds an account.
    let run = hub.run(&[
        "agents", "bind", "main", "--bind", "telegram", "--bind", "cli", "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("bind_skip_add", run.json(&hub));

    let before = hub.files();
    let run = hub.run(&[
        "agents",
        "bind",
        "main",
        "--bind",
        "slack:acme",
        "--bind",
        "cli",
        "--json",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    insta::assert_json_snapshot!("bind_conflict", run.json(&hub));
    assert_eq!(hub.files(), before, "a conflict writes nothing");

    // Upgrade: helper's channel-only... main's `{channel: telegram}` becomes account-scoped.
    std::fs::write(
        hub.config().join("channels.yaml"),
        hub.file("channels.yaml")
            .replace("      work:\n", "      personal: {}\n\n      work:\n"),
    )
    .unwrap();
    let run = hub.run(&[
        "agents",
        "bind",
        "main",
        "--bind",
        "telegram:personal",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("bind_upgrade", run.json(&hub));
    insta::assert_snapshot!(
        "bind_upgrade_bindings_yaml",
        hub.scrub(&hub.file("bindings.yaml"))
    );
}

#[test]
fn malformed_binds_are_usage_errors() {
    let hub = Hub::new();
    for bad in [":work", "telegram:", "tele gram", "a:b:c"] {
        let run = hub.run(&["agents", "bind", "main", "--bind", bad]);
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
        assert!(
            run.stderr.contains("hint: write --bind CHANNEL"),
            "{}",
            run.stderr
        );
    }
    let run = hub.run(&["agents", "bind", "nobody", "--bind", "cli"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("there is no agent `nobody`"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_edit_that_would_be_invalid_is_refused_with_file_and_line() {
    let hub = Hub::new();
    let before = hub.files();
    let run = hub.run(&["agents", "bind", "main", "--bind", "discord"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("bindings.yaml:19:"), "{}", run.stderr);
    assert!(
        run.stderr.contains("error[unknown-channel]"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("nothing was written"), "{}", run.stderr);
    assert_eq!(hub.files(), before);
}

/// The diagnostics of a refused edit point at the file as the command would have written it
/// (bindings.yaml:19 is the appended binding, past the end of the file on disk): the output
/// said nothing of it.
#[test]
fn a_refused_edit_says_its_positions_are_in_the_would_be_file() {
    let hub = Hub::new();
    let run = hub.run(&["agents", "add", "Ops", "--bind", "discord"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains(
            "note: line numbers in agents.yaml and bindings.yaml are those of the files as this \
             command would have written them, not as they are on disk"
        ),
        "{}",
        run.stderr
    );
    let run = hub.run(&["agents", "bind", "main", "--bind", "discord"]);
    assert!(
        run.stderr.contains(
            "note: line numbers in bindings.yaml are those of the file as this command would \
             have written it, not as it is on disk"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn dry_run_prints_the_diff_and_writes_nothing() {
    let hub = Hub::new();
    let before = hub.files();
    let run = hub.run(&[
        "agents",
        "unbind",
        "helper",
        "--bind",
        "telegram:work",
        "--dry-run",
    ]);
    ok(&run);
    insta::assert_snapshot!("unbind_dry_run_diff", run.stdout);
    assert_eq!(hub.files(), before);
}

#[test]
fn unbind_reports_removed_missing_and_conflicts() {
    let hub = Hub::new();
    let before = hub.files();
    let run = hub.run(&["agents", "unbind", "helper", "--bind", "telegram", "--json"]);
    assert_eq!(run.code, 1);
    insta::assert_json_snapshot!("unbind_conflict", run.json(&hub));
    assert_eq!(hub.files(), before);
    let run = hub.run(&[
        "agents",
        "unbind",
        "helper",
        "--bind",
        "slack:acme",
        "--bind",
        "discord",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("unbind", run.json(&hub));
    insta::assert_snapshot!(
        "unbind_bindings_yaml",
        hub.scrub(&hub.file("bindings.yaml"))
    );
}

#[test]
fn delete_prunes_bindings_and_allow_lists() {
    let hub = Hub::new();
    let run = hub.run(&["agents", "delete", "main", "--force"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("`main` cannot be deleted"),
        "{}",
        run.stderr
    );
    let run = hub.run(&["agents", "delete", "helper"]);
    assert_eq!(run.code, 2, "no terminal, no --force");
    assert!(run.stderr.contains("needs --force"), "{}", run.stderr);

    let run = hub.run(&["agents", "delete", "helper", "--force", "--json"]);
    ok(&run);
    insta::assert_json_snapshot!("delete", run.json(&hub));
    insta::assert_snapshot!("delete_agents_yaml", hub.scrub(&hub.file("agents.yaml")));
    insta::assert_snapshot!(
        "delete_bindings_yaml",
        hub.scrub(&hub.file("bindings.yaml"))
    );
    ok(&hub.run(&["validate"]));
}

#[test]
fn set_identity_reads_identity_md_and_flags_win() {
    let hub = Hub::new();
    let file = hub.root.join("IDENTITY.md");
    std::fs::write(
        &file,
        "# IDENTITY.md\n\n- **Name:** Helper Bee\n- Emoji: 🐝\n- Vibe: busy\n- Avatar: (none yet)\n",
    )
    .unwrap();
    let run = hub.run(&[
        "agents",
        "set-identity",
        "helper",
        "--identity-file",
        file.to_str().unwrap(),
        "--emoji",
        "🍯",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("set_identity", run.json(&hub));
    insta::assert_snapshot!(
        "set_identity_agents_yaml",
        hub.scrub(&hub.file("agents.yaml"))
    );
    // main's flow-style identity is edited in place.
    let run = hub.run(&[
        "agents",
        "set-identity",
        "main",
        "--theme",
        "calm",
        "--name",
        "Main Hub",
    ]);
    ok(&run);
    assert!(
        hub.file("agents.yaml")
            .contains("identity: {name: Main Hub, emoji: \"🦀\", theme: calm}\n"),
        "{}",
        hub.file("agents.yaml")
    );
    let run = hub.run(&["agents", "set-identity", "helper"]);
    assert_eq!(run.code, 2, "nothing to set");
}

#[test]
fn list_merges_identity_md_and_runtime_status_from_state() {
    let hub = Hub::new();
    ok(&hub.run(&["apply", "--auto-approve"]));
    // helper has no identity in the config: IDENTITY.md (the bootstrap template, filled) has it.
    std::fs::write(
        hub.state().join("workspaces/helper/IDENTITY.md"),
        "- Name: Helper From File\n- Emoji: 🧰\n",
    )
    .unwrap();
    let run = hub.run(&["agents", "list", "--json"]);
    ok(&run);
    insta::assert_json_snapshot!("list", run.json(&hub));
    let human = hub.run(&["agents", "list"]);
    ok(&human);
    assert!(human.stdout.contains("main (default)"), "{}", human.stdout);
}

// ---- outside edits ---------------------------------------------------------------------------

#[test]
fn an_outside_edit_between_read_and_write_is_detected_library() {
    let hub = Hub::new();
    let mut ctx = hub.ctx();
    ctx.before_write = Some(Arc::new(|path: &Path| {
        let text = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, format!("{text}# someone else\n")).unwrap();
    }));
    let targets = manage::agents::parse_binds(&["cli"]).unwrap();
    let err = manage::agents::bind(&ctx, "main", &targets, false).unwrap_err();
    assert!(matches!(err, ManageError::Stale(_)), "{err}");
    let bindings = hub.file("bindings.yaml");
    assert!(
        bindings.ends_with("# someone else\n"),
        "the outside edit stays"
    );
    assert!(!bindings.contains("channel: cli"), "ours was not written");
}

/// The binary-level check needs the `DEEPCLI_MANAGE_EDIT_BEFORE_WRITE` hook, which only a
/// `failpoints` build has.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it)"
)]
fn an_outside_edit_between_read_and_write_is_detected_cli() {
    let hub = Hub::new();
    let run = hub.run_env(
        &["agents", "bind", "main", "--bind", "cli"],
        &[("DEEPCLI_MANAGE_EDIT_BEFORE_WRITE", "bindings.yaml")],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("changed on disk while this command ran"),
        "{}",
        run.stderr
    );
    let bindings = hub.file("bindings.yaml");
    assert!(
        bindings.ends_with("# edited meanwhile\n"),
        "the outside edit stays: {bindings}"
    );
    assert!(!bindings.contains("channel: cli"), "ours was not written");
}

// ---- channels --------------------------------------------------------------------------------

#[test]
fn channels_list_status_capabilities_logs() {
    let hub = Hub::new();
    let run = hub.run(&["channels", "list", "--json"]);
    ok(&run);
    insta::assert_json_snapshot!("channels_list", run.json(&hub));
    let run = hub.run_env(
        &["channels", "status", "--json"],
        &[("TELEGRAM_BOT_TOKEN", "set")],
    );
    // The hub's other accounts miss their credentials here: the command fails for them.
    assert_eq!(run.code, 1, "{}", run.stderr);
    insta::assert_json_snapshot!("channels_status", run.json(&hub));
    let run = hub.run(&["channels", "capabilities", "--channel", "discord", "--json"]);
    ok(&run);
    insta::assert_json_snapshot!("channels_capabilities_discord", run.json(&hub));
    let run = hub.run(&["channels", "capabilities", "--channel", "dicsord"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("did you mean `discord`?"),
        "{}",
        run.stderr
    );
    std::fs::create_dir_all(hub.state().join("logs/channels")).unwrap();
    std::fs::write(
        hub.state().join("logs/channels/telegram.log"),
        "one\ntwo\nthree\n",
    )
    .unwrap();
    let run = hub.run(&[
        "channels",
        "logs",
        "--channel",
        "telegram",
        "--lines",
        "2",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("channels_logs", run.json(&hub));
}

/// `--probe` per account, each kind of result. Slack and Telegram accounts get a real
/// credential check (`getMe` / `auth.test`, here refused before any call: their tokens are not
/// set); other platforms a reachability check of their API host, put on loopback
/// (`DEEPCLI_PROBE_TARGETS`, a `failpoints` hook), Discord's on a listener and WhatsApp's on a
/// port where nothing listens, so the results do not depend on the network.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it) for DEEPCLI_PROBE_TARGETS"
)]
fn channels_status_probe_says_what_it_saw_per_account() {
    let hub = Hub::new();
    let channels = hub.file("channels.yaml").replace(
        "        botToken: \"${TELEGRAM_WORK_TOKEN}\"\n",
        "        botToken: \"${TELEGRAM_WORK_TOKEN}\"\n        enabled: false\n",
    ) + "  matrix: {}\n  discord: {}\n  whatsapp: {}\n";
    std::fs::write(hub.config().join("channels.yaml"), channels).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap().to_string();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let targets = format!("discord={open},whatsapp={closed}");
    let run = hub.run_env(
        &[
            "channels",
            "status",
            "--probe",
            "--timeout",
            "20000",
            "--json",
        ],
        &[("DEEPCLI_PROBE_TARGETS", &targets)],
    );
    // whatsapp's host is out of reach: the command fails for it.
    assert_eq!(run.code, 1, "{}", run.stderr);
    let doc = run.json(&hub);
    let mut probes = Vec::new();
    for a in doc["accounts"].as_array().unwrap() {
        let mut probe = a["probe"].clone();
        // How long it took is the one thing not asserted: only that it is said when a host was
        // tried.
        let elapsed = probe
            .as_object_mut()
            .and_then(|p| p.remove("elapsedMs"))
            .map(|ms| ms.is_u64());
        probes.push((
            format!(
                "{}/{}",
                a["channel"].as_str().unwrap(),
                a["account"].as_str().unwrap()
            ),
            probe,
            elapsed,
        ));
    }
    let refused = probes
        .iter()
        .find(|(account, ..)| account == "whatsapp/default")
        .and_then(|(_, p, _)| p["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        refused.starts_with("cannot connect: ") && refused.contains("refused"),
        "{refused}"
    );
    assert_eq!(
        probes,
        [
            ("cli/default".to_string(), json!({"result": "local"}), None),
            (
                "telegram/default".to_string(),
                json!({"result": "refused", "error": "`botToken`: environment variable `TELEGRAM_BOT_TOKEN` is not set"}),
                Some(true)
            ),
            (
                "telegram/work".to_string(),
                json!({"result": "skipped", "error": "the account is disabled"}),
                None
            ),
            (
                "slack/acme".to_string(),
                json!({"result": "refused", "error": "`botToken`: environment variable `SLACK_ACME_TOKEN` is not set"}),
                Some(true)
            ),
            (
                "matrix/default".to_string(),
                json!({"result": "skipped", "error": "deepcli knows no API endpoint for this platform"}),
                None
            ),
            (
                "discord/default".to_string(),
                json!({"result": "reachable", "target": open}),
                Some(true)
            ),
            (
                "whatsapp/default".to_string(),
                json!({"result": "unreachable", "target": closed, "error": refused}),
                Some(true)
            ),
        ]
    );
    // The reachable host really was connected to.
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok(), "the probe never connected");
}

#[test]
fn channels_add_writes_references_and_moves_the_single_account() {
    let hub = Hub::new();
    let before = hub.files();
    let run = hub.run(&[
        "channels",
        "add",
        "--channel",
        "slack",
        "--account",
        "beta",
        "--bot-token",
        "xoxb-123-secret",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        !run.stderr.contains("xoxb") && !run.stdout.contains("xoxb"),
        "the secret is never echoed:\nstdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
    assert_eq!(hub.files(), before);

    // slack has one account `acme` that a binding names: it becomes defaultAccount.
    let run = hub.run(&[
        "channels",
        "add",
        "--channel",
        "slack",
        "--account",
        "beta",
        "--bot-token",
        "env:SLACK_BETA",
        "--app-token",
        "file:/run/secrets/slack-beta",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("channels_add_slack", run.json(&hub));
    // A new channel with an implicit default account, then a second account: moved to default.
    let run = hub.run(&[
        "channels",
        "add",
        "--channel",
        "discord",
        "--account",
        "guild",
        "--name",
        "Guild bot",
        "--token",
        "${DISCORD_GUILD}",
        "--json",
    ]);
    ok(&run);
    let run = hub.run(&[
        "channels",
        "add",
        "--channel",
        "discord",
        "--account",
        "other",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("channels_add_discord_second", run.json(&hub));
    insta::assert_snapshot!(
        "channels_add_channels_yaml",
        hub.scrub(&hub.file("channels.yaml"))
    );
    ok(&hub.run(&["validate"]));
}

#[test]
fn channels_remove_disables_or_deletes() {
    let hub = Hub::new();
    let run = hub.run(&[
        "channels",
        "remove",
        "--channel",
        "telegram",
        "--account",
        "work",
        "--json",
    ]);
    ok(&run);
    insta::assert_json_snapshot!("channels_remove_disable", run.json(&hub));
    assert!(hub.file("channels.yaml").contains(
        "      work:\n        botToken: \"${TELEGRAM_WORK_TOKEN}\"\n        enabled: false\n"
    ));
    // Deleting an account a binding routes is refused by validation (bindings own routes).
    let before = hub.files();
    let run = hub.run(&[
        "channels",
        "remove",
        "--channel",
        "telegram",
        "--account",
        "work",
        "--delete",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("error[unknown-account]"),
        "{}",
        run.stderr
    );
    assert_eq!(hub.files(), before);
    ok(&hub.run(&["agents", "unbind", "helper", "--bind", "telegram:work"]));
    let run = hub.run(&[
        "channels",
        "remove",
        "--channel",
        "telegram",
        "--account",
        "work",
        "--delete",
        "--json",
    ]);
    ok(&run);
    insta::assert_snapshot!(
        "channels_remove_channels_yaml",
        hub.scrub(&hub.file("channels.yaml"))
    );
    let run = hub.run(&["channels", "remove", "--channel", "cli", "--json"]);
    ok(&run);
    assert!(
        hub.file("channels.yaml")
            .contains("  cli: {enabled: false}   # the local terminal\n")
    );
}

// ---- JSON-RPC --------------------------------------------------------------------------------

fn rpc(hub: &Hub, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let answer = manage::rpc::handle(&hub.ctx(), body.to_string().as_bytes()).unwrap();
    assert_eq!(answer["id"], 7);
    let text = hub.scrub(&answer.to_string());
    serde_json::from_str(&text).unwrap()
}

/// Runs the same call through the CLI on one hub and the dispatcher on another, and compares
/// the results and the files afterwards.
fn parity(cli: &[&str], method: &str, params: Value) {
    let a = Hub::new();
    let b = Hub::new();
    let run = a.run(cli);
    let answer = rpc(&b, method, params);
    let result = answer
        .get("result")
        .unwrap_or_else(|| panic!("{method}: {answer}"));
    assert_eq!(&run.json(&a), result, "{method}: CLI and RPC agree");
    assert_eq!(a.files(), b.files(), "{method}: same files");
}

#[test]
fn rpc_answers_what_the_cli_prints_for_every_method() {
    parity(
        &["agents", "list", "--bindings", "--json"],
        "_mustang.agent/agents/list",
        json!({"bindings": true}),
    );
    parity(
        &[
            "agents", "add", "ops", "--model", "m/x", "--bind", "cli", "--json",
        ],
        "_mustang.agent/agents/create",
        json!({"name": "ops", "model": "m/x", "bind": ["cli"]}),
    );
    parity(
        &["agents", "delete", "helper", "--force", "--json"],
        "_mustang.agent/agents/delete",
        json!({"agentId": "helper", "force": true}),
    );
    parity(
        &[
            "agents",
            "set-identity",
            "helper",
            "--name",
            "H",
            "--emoji",
            "🐝",
            "--json",
        ],
        "_mustang.agent/agents/set_identity",
        json!({"agentId": "helper", "name": "H", "emoji": "🐝"}),
    );
    parity(
        &["agents", "bindings", "--agent", "helper", "--json"],
        "_mustang.agent/agents/list_bindings",
        json!({"agentId": "helper"}),
    );
    parity(
        &["agents", "bind", "helper", "--bind", "cli", "--json"],
        "_mustang.agent/agents/bind",
        json!({"agentId": "helper", "bind": ["cli"]}),
    );
    parity(
        &["agents", "bind", "helper", "--bind", "telegram", "--json"],
        "_mustang.agent/agents/bind",
        json!({"agentId": "helper", "bind": ["telegram"]}),
    );
    parity(
        &["agents", "unbind", "helper", "--all", "--json"],
        "_mustang.agent/agents/unbind",
        json!({"agentId": "helper", "all": true}),
    );
    parity(
        &["channels", "list", "--json"],
        "_mustang.agent/channels/list",
        json!({}),
    );
    parity(
        &["channels", "status", "--json"],
        "_mustang.agent/channels/status",
        json!({}),
    );
    parity(
        &["channels", "capabilities", "--json"],
        "_mustang.agent/channels/capabilities",
        json!({}),
    );
    parity(
        &["channels", "logs", "--json"],
        "_mustang.agent/channels/logs",
        json!({}),
    );
    parity(
        &[
            "channels",
            "add",
            "--channel",
            "telegram",
            "--account",
            "x",
            "--bot-token",
            "env:X",
            "--json",
        ],
        "_mustang.agent/channels/add",
        json!({"channel": "telegram", "account": "x", "credentials": {"botToken": "env:X"}}),
    );
    parity(
        &[
            "channels",
            "remove",
            "--channel",
            "slack",
            "--account",
            "acme",
            "--json",
        ],
        "_mustang.agent/channels/remove",
        json!({"channel": "slack", "account": "acme"}),
    );
    // `update` has no CLI twin: it is the same edits as set-identity and bind together.
    let a = Hub::new();
    ok(&a.run(&["agents", "set-identity", "helper", "--name", "H"]));
    ok(&a.run(&["agents", "bind", "helper", "--bind", "cli"]));
    let b = Hub::new();
    let answer = rpc(
        &b,
        "_mustang.agent/agents/update",
        json!({"agentId": "helper", "patch": {"identity": {"name": "H"}, "bindings": {"add": ["cli"]}}}),
    );
    insta::assert_json_snapshot!("rpc_update", answer);
    assert_eq!(a.files(), b.files());
}

#[test]
fn rpc_errors_batches_and_notifications() {
    let hub = Hub::new();
    let ctx = hub.ctx();
    let call = |body: &str| manage::rpc::handle(&ctx, body.as_bytes());
    assert_eq!(call("{nope").unwrap()["error"]["code"], -32700);
    assert_eq!(call("[]").unwrap()["error"]["code"], -32600);
    assert_eq!(
        call(r#"{"id":1,"method":"_mustang.agent/agents/list"}"#).unwrap()["error"]["code"],
        -32600
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":1,"method":"_mustang.agent/agents/fly"}"#).unwrap()["error"]
            ["code"],
        -32601
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":1,"method":"_mustang.agent/agents/bind","params":{"agent":"x"}}"#).unwrap()["error"]["code"],
        -32602
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":1,"method":"_mustang.agent/agents/bind","params":{"agentId":"main","bind":[":x"]}}"#).unwrap()["error"]["code"],
        -32602
    );
    let invalid = call(r#"{"jsonrpc":"2.0","id":"a","method":"_mustang.agent/agents/bind","params":{"agentId":"main","bind":["discord"]}}"#).unwrap();
    assert_eq!(invalid["error"]["code"], -32003);
    // `data.diagnostics` is the `validate --format json` document of the would-be config.
    let mut diagnostics: Value =
        serde_json::from_str(&hub.scrub(&invalid["error"]["data"]["diagnostics"].to_string()))
            .unwrap();
    // The hub's keys that nothing enforces (a default model on agents that run nothing,
    // subagents, agentToAgent) are warned about in it as anywhere: set them aside.
    let all = diagnostics["diagnostics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (unenforced, rest): (Vec<Value>, Vec<Value>) =
        all.into_iter().partition(|d| d["rule"] == "not-enforced");
    assert_eq!(diagnostics["warnings"], unenforced.len(), "{diagnostics:#}");
    diagnostics["warnings"] = 0.into();
    diagnostics["diagnostics"] = rest.into();
    assert_eq!(
        diagnostics,
        json!({
            "formatVersion": "2",
            "valid": false,
            "errors": 1,
            "warnings": 0,
            "diagnostics": [{
                "rule": "unknown-channel",
                "severity": "error",
                "message": "channel `discord` is not declared in channels.yaml",
                "hint": "add `discord:` under `channels` in channels.yaml",
                "file": "[TMP]/config/bindings.yaml",
                "line": 19,
                "column": 22,
                "pointer": "/bindings/3/match/channel",
                "related": []
            }]
        })
    );
    let refused = call(r#"{"jsonrpc":"2.0","id":2,"method":"_mustang.agent/agents/delete","params":{"agentId":"helper"}}"#).unwrap();
    assert_eq!(refused["error"]["code"], -32002);
    // A notification runs but gets no answer; a batch answers its requests only, in order.
    assert!(call(r#"{"jsonrpc":"2.0","method":"_mustang.agent/agents/bind","params":{"agentId":"main","bind":["cli"]}}"#).is_none());
    assert!(hub.file("bindings.yaml").contains("channel: cli"));
    let batch = call(
        r#"[{"jsonrpc":"2.0","id":1,"method":"_mustang.agent/channels/capabilities","params":{"channel":"cli"}},
            {"jsonrpc":"2.0","method":"_mustang.agent/channels/list"},
            {"jsonrpc":"2.0","id":2,"method":"nope"}, 5]"#,
    )
    .unwrap();
    let batch = batch.as_array().unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[0]["result"]["channels"][0]["channel"], "cli");
    assert_eq!(batch[1]["error"]["code"], -32601);
    assert_eq!(batch[2]["error"]["code"], -32600);
}

/// A management edit rewrites a config file through a temporary file: it keeps the mode the
/// file had (it used to come back 0600, the temporary file's, locking a shared checkout's group
/// out).
#[test]
fn a_management_edit_keeps_the_files_mode() {
    use std::os::unix::fs::PermissionsExt;
    let hub = Hub::new();
    let agents = hub.config().join("agents.yaml");
    std::fs::set_permissions(&agents, std::fs::Permissions::from_mode(0o664)).unwrap();
    let run = hub.run(&["agents", "add", "writer", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(hub.file("agents.yaml").contains("writer"));
    let mode = std::fs::metadata(&agents).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o664, "{mode:o}");
}

// ---- human output ----------------------------------------------------------------------------

/// Runs each command on `hub` in turn and writes what a person sees: the command, its exit
/// code, stdout and stderr.
fn transcript(hub: &Hub, commands: &[&[&str]]) -> String {
    let mut text = String::new();
    for args in commands {
        let run = hub.run(args);
        text.push_str(&format!(
            "$ deepcli {}\n[exit {}]\n",
            args.join(" "),
            run.code
        ));
        for (name, out) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
            if !out.is_empty() {
                text.push_str(&format!("--- {name}\n{}", hub.scrub(out)));
                if !out.ends_with('\n') {
                    text.push('\n');
                }
            }
        }
        text.push('\n');
    }
    text
}

/// What people read from every `agents …` command, dry runs included.
#[test]
fn agents_human_output() {
    let hub = Hub::new();
    insta::assert_snapshot!(transcript(
        &hub,
        &[
            &["agents", "list"],
            &["agents", "bindings"],
            &["agents", "bindings", "--agent", "nobody"],
            &["agents", "add", "Ops Bot", "--bind", "cli", "--dry-run"],
            &["agents", "add", "Ops Bot", "--bind", "telegram:work"],
            &["agents", "add", "Ops Bot"],
            &[
                "agents",
                "set-identity",
                "ops-bot",
                "--name",
                "Ops",
                "--dry-run"
            ],
            &["agents", "set-identity", "ops-bot", "--name", "Ops"],
            &["agents", "set-identity", "ops-bot", "--name", "Ops"],
            &["agents", "bind", "ops-bot", "--bind", "cli", "--dry-run"],
            &["agents", "bind", "ops-bot", "--bind", "cli"],
            &[
                "agents", "bind", "ops-bot", "--bind", "cli", "--bind", "telegram"
            ],
            &["agents", "bind", "ops-bot", "--bind", "discord"],
            &[
                "agents",
                "unbind",
                "helper",
                "--bind",
                "slack:acme",
                "--bind",
                "discord",
                "--dry-run"
            ],
            &["agents", "unbind", "helper", "--bind", "telegram"],
            &["agents", "delete", "helper", "--force", "--dry-run"],
            &["agents", "delete", "ops-bot", "--force"],
        ],
    ));
}

/// What people read from every `channels …` command, dry runs included.
#[test]
fn channels_human_output() {
    let hub = Hub::new();
    insta::assert_snapshot!(transcript(
        &hub,
        &[
            &["channels", "list"],
            &["channels", "status"],
            &["channels", "capabilities", "--channel", "slack"],
            &["channels", "logs"],
            &[
                "channels",
                "add",
                "--channel",
                "slack",
                "--account",
                "beta",
                "--bot-token",
                "env:SLACK_BETA",
                "--dry-run"
            ],
            &[
                "channels",
                "add",
                "--channel",
                "discord",
                "--account",
                "guild",
                "--token",
                "env:DISCORD_GUILD"
            ],
            &[
                "channels",
                "add",
                "--channel",
                "discord",
                "--account",
                "other",
                "--dry-run"
            ],
            &[
                "channels",
                "remove",
                "--channel",
                "telegram",
                "--account",
                "work",
                "--dry-run"
            ],
            &["channels", "remove", "--channel", "cli"],
        ],
    ));
}

/// A count of one took a plural noun: "1 errors", "(1 bindings)", "1 agentToAgent.allow
/// entries".
#[test]
fn a_count_of_one_takes_a_singular_noun() {
    let hub = Hub::new();
    let text = transcript(
        &hub,
        &[
            &["channels", "list"],
            &["agents", "bind", "main", "--bind", "discord"],
            &["agents", "delete", "helper", "--force", "--dry-run"],
        ],
    );
    for wrong in [
        "1 errors",
        "(1 bindings)",
        "1 agentToAgent.allow entries",
        "1 subagents.allowAgents entries",
    ] {
        assert!(!text.contains(wrong), "`{wrong}` in:\n{text}");
    }
    for right in [
        "(1 error)",
        "(1 binding)",
        "1 agentToAgent.allow entry",
        "1 subagents.allowAgents entry",
    ] {
        assert!(text.contains(right), "no `{right}` in:\n{text}");
    }
}

/// Dry runs spoke in the past tense ("Removed agent …", "added: cli"): every line of a dry run
/// says what would happen, the JSON says `dryRun: true`, and nothing is written.
#[test]
fn dry_runs_say_what_would_happen() {
    let hub = Hub::new();
    ok(&hub.run(&[
        "channels",
        "add",
        "--channel",
        "discord",
        "--account",
        "guild",
    ]));
    let before = hub.files();
    let dry_runs: &[&[&str]] = &[
        &["agents", "add", "Ops Bot", "--bind", "cli", "--dry-run"],
        &[
            "agents",
            "set-identity",
            "helper",
            "--name",
            "H",
            "--dry-run",
        ],
        &["agents", "bind", "helper", "--bind", "cli", "--dry-run"],
        &["agents", "unbind", "helper", "--all", "--dry-run"],
        &["agents", "delete", "helper", "--force", "--dry-run"],
        &[
            "channels",
            "add",
            "--channel",
            "slack",
            "--account",
            "beta",
            "--dry-run",
        ],
        &[
            "channels",
            "add",
            "--channel",
            "discord",
            "--account",
            "other",
            "--dry-run",
        ],
        &["channels", "remove", "--channel", "cli", "--dry-run"],
    ];
    for args in dry_runs {
        let run = hub.run(args);
        ok(&run);
        let said: Vec<&str> = run.stdout.lines().filter(|l| !is_diff_line(l)).collect();
        assert!(!said.is_empty(), "{args:?} says nothing but the diff");
        for line in &said {
            let lower = line.to_lowercase();
            assert!(
                lower.contains("would")
                    || lower.starts_with("not bound")
                    || lower.starts_with("already bound"),
                "{args:?}: `{line}` does not say what would happen"
            );
        }
        let mut json_args = args.to_vec();
        json_args.push("--json");
        let doc = hub.run(&json_args).json(&hub);
        assert_eq!(doc["written"]["dryRun"], true, "{args:?}: {doc}");
        assert!(doc["written"]["diff"].is_string(), "{args:?}: {doc}");
        assert_eq!(hub.files(), before, "{args:?} wrote");
    }
}

/// A line of a unified diff (`--- a/x`, `+++ b/x`, `@@ … @@`, ` `, `+`, `-`).
fn is_diff_line(line: &str) -> bool {
    line.starts_with("--- ")
        || line.starts_with("+++ ")
        || line.starts_with("@@ ")
        || line.starts_with([' ', '+', '-'])
        || line.is_empty()
}

/// `--quiet` silences what a command says about what it did ("Wrote …", "Added agent …",
/// "No changes", apply's summary); answers (lists, JSON, --dry-run diffs) and errors stay.
#[test]
fn quiet_keeps_answers_and_errors_only() {
    let hub = Hub::new();
    let run = hub.run(&["--quiet", "agents", "add", "ops"]);
    ok(&run);
    assert_eq!(run.stdout, "", "a write says nothing");
    assert!(hub.file("agents.yaml").contains("id: ops"));

    let run = hub.run(&["agents", "bind", "ops", "--bind", "cli", "--dry-run", "-q"]);
    ok(&run);
    assert!(
        run.stdout.starts_with("--- a/bindings.yaml\n"),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.to_lowercase().contains("would"),
        "only the diff: {}",
        run.stdout
    );

    assert_eq!(
        hub.run(&["agents", "list", "-q"]).stdout,
        hub.run(&["agents", "list"]).stdout,
        "a list is the answer"
    );
    let quiet = hub.run(&[
        "agents", "bind", "ops", "--bind", "telegram", "--json", "-q",
    ]);
    let loud = hub.run(&["agents", "bind", "ops", "--bind", "telegram", "--json"]);
    assert_eq!(
        (quiet.code, &quiet.stdout),
        (1, &loud.stdout),
        "JSON unaffected"
    );

    let run = hub.run(&["agents", "bind", "nobody", "--bind", "cli", "-q"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("error: there is no agent `nobody`"),
        "{}",
        run.stderr
    );

    for _ in 0..2 {
        let run = hub.run(&["apply", "--auto-approve", "--quiet"]);
        ok(&run);
        assert_eq!(run.stdout, "", "apply (then no changes) says nothing");
    }
}
