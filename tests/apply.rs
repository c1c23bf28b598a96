//! `deepcli plan` / `apply` / `trash` end to end with the real binary, real SQLite and temp
//! dirs: bootstrap, idempotence, identity updates, trash and restore, guards, saved plans,
//! the lease, and crash safety at every journal step (with the `failpoints` feature).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

struct Hub {
    _tmp: Option<tempfile::TempDir>,
    config: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

const BINDINGS: &str =
    "bindings:\n  - agentId: research\n    match: {channel: telegram, accountId: \"*\"}\n";

fn agent(id: &str, extra: &str) -> String {
    format!("    - id: {id}\n      name: {id}\n{extra}")
}

impl Hub {
    fn new() -> Hub {
        let tmp = tempfile::tempdir().unwrap();
        let mut hub = Hub::at(tmp.path());
        hub._tmp = Some(tmp);
        hub
    }

    /// A hub in `root`, emptied first: runs that must compare hashes of resolved paths need
    /// the same paths.
    fn at(root: &Path) -> Hub {
        let _ = std::fs::remove_dir_all(root);
        let config = root.join("config");
        let state = root.join("state");
        let home = root.join("home");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            config.join("channels.yaml"),
            "channels:\n  telegram:\n    accounts:\n      default: {botToken: {source: env, id: TG_TOKEN}}\n  slack:\n    accounts:\n      default: {botToken: {source: env, id: SLACK_TOKEN}}\n",
        )
        .unwrap();
        Hub {
            _tmp: None,
            config,
            state,
            home,
        }
    }

    fn agents(&self, list: &[String]) {
        let text = format!("agents:\n  list:\n{}", list.concat());
        std::fs::write(self.config.join("agents.yaml"), text).unwrap();
    }

    fn bindings(&self, text: &str) {
        std::fs::write(self.config.join("bindings.yaml"), text).unwrap();
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::cargo_bin("deepcli").unwrap();
        cmd.env("HOME", &self.home)
            .env("DEEPCLI_CONFIG", &self.config)
            .env("DEEPCLI_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .env_remove("DEEPCLI_FAILPOINT")
            .args(args);
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

    fn apply(&self, extra: &[&str]) -> Run {
        let mut args = vec!["apply", "--auto-approve"];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn applied(&self) -> Run {
        let run = self.apply(&[]);
        assert_eq!(run.code, 0, "apply failed:\n{}\n{}", run.stdout, run.stderr);
        run
    }

    fn workspace(&self, id: &str) -> PathBuf {
        self.state.join("workspaces").join(id)
    }

    fn export(&self) -> Value {
        let run = self.run(&["state", "export"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        serde_json::from_str(&run.stdout).unwrap()
    }
}

fn two_agents(hub: &Hub) {
    hub.agents(&[
        agent("main", ""),
        agent(
            "research",
            "      identity: {name: Research, emoji: \"🔎\"}\n",
        ),
    ]);
    hub.bindings(BINDINGS);
}

#[test]
fn first_apply_bootstraps_and_second_plan_is_empty() {
    let hub = Hub::new();
    two_agents(&hub);
    let plan = hub.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(
        plan.code, 2,
        "changes pending:\n{}{}",
        plan.stdout, plan.stderr
    );
    assert!(!hub.state.join("state.db").exists(), "plan writes nothing");
    hub.applied();
    for id in ["main", "research"] {
        let ws = hub.workspace(id);
        for name in deepcli::workspace::FILES {
            assert!(ws.join(name).is_file(), "{id}: {name}");
        }
        assert!(hub.state.join("agents").join(id).join("agent").is_dir());
        assert!(hub.state.join("agents").join(id).join("sessions").is_dir());
    }
    let identity = std::fs::read_to_string(hub.workspace("research").join("IDENTITY.md")).unwrap();
    assert!(
        identity.contains("- Name: Research") && identity.contains("🔎"),
        "{identity}"
    );
    assert!(hub.state.join("routing-plan.json").is_file());
    let again = hub.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert!(again.stdout.contains("no changes"), "{}", again.stdout);
    let history = hub.run(&["history", "--json"]);
    let doc: Value = serde_json::from_str(&history.stdout).unwrap();
    assert_eq!(doc["applies"][0]["outcome"], "applied");
    assert_eq!(doc["applies"][0]["source"], "cli");
    assert_eq!(
        doc["applies"][0]["added"], 5,
        "2 agents, 1 binding, 2 accounts"
    );
}

#[test]
fn existing_files_are_never_overwritten_and_bootstrap_only_goes_to_empty_workspaces() {
    let hub = Hub::new();
    let ws = hub.workspace("main");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("SOUL.md"), "mine\n").unwrap();
    hub.agents(&[agent("main", "")]);
    hub.applied();
    assert_eq!(
        std::fs::read_to_string(ws.join("SOUL.md")).unwrap(),
        "mine\n"
    );
    assert!(ws.join("AGENTS.md").is_file());
    assert!(
        !ws.join("BOOTSTRAP.md").exists(),
        "not a brand-new workspace"
    );
}

#[test]
fn identity_updates_an_untouched_file_and_keeps_an_edited_one() {
    let hub = Hub::new();
    hub.agents(&[
        agent("main", "      identity: {name: Old}\n"),
        agent("research", "      identity: {name: Old}\n"),
    ]);
    hub.applied();
    let edited = hub.workspace("research").join("IDENTITY.md");
    std::fs::write(&edited, "# my own identity\n").unwrap();
    hub.agents(&[
        agent("main", "      identity: {name: New}\n"),
        agent("research", "      identity: {name: New}\n"),
    ]);
    let plan = hub.run(&["plan"]);
    assert!(plan.stdout.contains("write IDENTITY.md"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("IDENTITY.md edited (kept"),
        "{}",
        plan.stdout
    );
    hub.applied();
    let main = std::fs::read_to_string(hub.workspace("main").join("IDENTITY.md")).unwrap();
    assert!(main.contains("- Name: New"), "{main}");
    assert_eq!(
        std::fs::read_to_string(&edited).unwrap(),
        "# my own identity\n"
    );
    let again = hub.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
    assert!(
        !again.stdout.contains("edited"),
        "said once, with the change: {}",
        again.stdout
    );
}

#[test]
fn a_deleted_bootstrap_file_is_drift_and_is_repaired() {
    let hub = Hub::new();
    hub.agents(&[agent("main", "")]);
    hub.applied();
    std::fs::remove_file(hub.workspace("main").join("SOUL.md")).unwrap();
    std::fs::remove_file(hub.workspace("main").join("BOOTSTRAP.md")).unwrap();
    let plan = hub.run(&["plan"]);
    assert!(
        plan.stdout.contains("Changed outside deepcli"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("workspace file SOUL.md was deleted"),
        "{}",
        plan.stdout
    );
    hub.applied();
    assert!(hub.workspace("main").join("SOUL.md").is_file());
    assert!(
        !hub.workspace("main").join("BOOTSTRAP.md").exists(),
        "BOOTSTRAP.md is for the first run only: the agent deletes it"
    );
}

#[test]
fn deleting_an_agent_moves_it_to_trash_and_restore_puts_it_back() {
    let hub = Hub::new();
    hub.agents(&[
        agent("main", ""),
        agent("a", ""),
        agent("b", ""),
        agent("c", ""),
    ]);
    hub.applied();
    std::fs::write(hub.workspace("c").join("notes.txt"), "precious").unwrap();
    hub.agents(&[agent("main", ""), agent("a", ""), agent("b", "")]);
    let plan = hub.run(&["plan"]);
    assert!(plan.stdout.contains("- agent c"), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("→ trash: workspace, agentDir, sessions"),
        "{}",
        plan.stdout
    );
    let run = hub.applied();
    assert!(run.stdout.contains("Moved to trash"), "{}", run.stdout);
    assert!(!hub.workspace("c").exists());
    let list = hub.run(&["trash", "list", "--json"]);
    let doc: Value = serde_json::from_str(&list.stdout).unwrap();
    let entry = doc["entries"][0]["entry"].as_str().unwrap().to_string();
    assert!(entry.starts_with("c-"), "{entry}");
    let stored = hub
        .state
        .join("trash")
        .join(&entry)
        .join("workspace")
        .join("notes.txt");
    assert_eq!(std::fs::read_to_string(stored).unwrap(), "precious");
    let restore = hub.run(&["trash", "restore", &entry]);
    assert_eq!(restore.code, 0, "{}{}", restore.stdout, restore.stderr);
    assert_eq!(
        std::fs::read_to_string(hub.workspace("c").join("notes.txt")).unwrap(),
        "precious"
    );
    // Restoring again finds nothing to restore and says so.
    let twice = hub.run(&["trash", "restore", &entry]);
    assert_eq!(twice.code, 1);
}

#[test]
fn a_shared_workspace_is_kept() {
    let hub = Hub::new();
    let shared = hub.home.join("shared");
    let ws = format!("      workspace: {}\n", shared.display());
    hub.agents(&[agent("main", ""), agent("a", &ws), agent("b", &ws)]);
    hub.applied();
    hub.agents(&[agent("main", ""), agent("a", &ws)]);
    let plan = hub.run(&["plan"]);
    assert!(
        plan.stdout
            .contains("workspace shared with agent `a`: kept"),
        "{}",
        plan.stdout
    );
    hub.applied();
    assert!(
        shared.join("AGENTS.md").is_file(),
        "the shared workspace stays"
    );
}

#[test]
fn protected_agents_need_allow_destroy() {
    let hub = Hub::new();
    hub.agents(&[
        agent("main", ""),
        agent("a", ""),
        agent("b", ""),
        agent("vault", "      protect: true\n"),
    ]);
    hub.applied();
    hub.agents(&[agent("main", ""), agent("a", ""), agent("b", "")]);
    let refused = hub.apply(&[]);
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains("--allow-destroy"),
        "{}",
        refused.stderr
    );
    assert!(hub.workspace("vault").is_dir(), "nothing moved");
    let run = hub.apply(&["--allow-destroy"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(!hub.workspace("vault").exists());
}

#[test]
fn an_emptied_agents_file_needs_allow_mass_delete() {
    let hub = Hub::new();
    hub.agents(&[
        agent("main", ""),
        agent("a", ""),
        agent("b", ""),
        agent("c", ""),
    ]);
    hub.applied();
    std::fs::write(hub.config.join("agents.yaml"), "").unwrap();
    let refused = hub.apply(&[]);
    assert_eq!(refused.code, 1, "{}{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("deletes 3 of 4 managed agents"),
        "{}",
        refused.stderr
    );
    for id in ["a", "b", "c"] {
        assert!(hub.workspace(id).is_dir());
    }
    let run = hub.apply(&["--allow-mass-delete"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(hub.workspace("main").is_dir(), "main is never trashed");
}

#[test]
fn a_workspace_at_home_is_refused_before_anything_is_written() {
    let hub = Hub::new();
    let at_home = format!("      workspace: {}\n", hub.home.display());
    hub.agents(&[agent("main", ""), agent("risky", &at_home)]);
    let refused = hub.apply(&[]);
    assert_eq!(refused.code, 1, "{}{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("home directory"),
        "{}",
        refused.stderr
    );
    assert!(
        !hub.home.join("AGENTS.md").exists(),
        "nothing bootstrapped into ~"
    );
    assert!(
        !hub.workspace("main").exists(),
        "a blocked plan applies nothing"
    );
}

#[test]
fn a_stale_saved_plan_is_refused() {
    let hub = Hub::new();
    two_agents(&hub);
    let plan_file = hub.state.with_extension("plan.json");
    let saved = hub.run(&["plan", "--out", plan_file.to_str().unwrap()]);
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    hub.agents(&[agent("main", ""), agent("research", "")]);
    let stale = hub.run(&["apply", plan_file.to_str().unwrap()]);
    assert_eq!(stale.code, 1);
    assert!(
        stale.stderr.contains("stale: the config files changed"),
        "{}",
        stale.stderr
    );
    assert!(!hub.workspace("main").exists(), "nothing applied");
    two_agents(&hub);
    let fresh = hub.run(&["apply", plan_file.to_str().unwrap()]);
    assert_eq!(fresh.code, 0, "{}{}", fresh.stdout, fresh.stderr);
    let again = hub.run(&["apply", plan_file.to_str().unwrap()]);
    assert_eq!(again.code, 1, "the state moved on: serial changed");
    assert!(again.stderr.contains("applied since"), "{}", again.stderr);
}

#[test]
fn apply_without_a_terminal_needs_auto_approve() {
    let hub = Hub::new();
    two_agents(&hub);
    let run = hub.run(&["apply"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("--auto-approve"), "{}", run.stderr);
    assert!(!hub.workspace("main").exists());
}

#[test]
fn a_second_writer_fails_naming_the_holder() {
    use deepcli::state::LeasePurpose;
    let hub = Hub::new();
    two_agents(&hub);
    let dir = deepcli::state::StateDir::new(&hub.state);
    let mut store = deepcli::state::StateStore::open(&dir).unwrap();
    let me = std::process::id();
    for (purpose, says) in [
        (LeasePurpose::Apply, format!("locked by pid {me} on")),
        (
            LeasePurpose::Controller,
            format!("a controller (deepcli up, pid {me}"),
        ),
    ] {
        store
            .acquire_lease(purpose, std::time::Duration::ZERO)
            .unwrap();
        let run = hub.apply(&[]);
        assert_eq!(run.code, 1);
        assert!(run.stderr.contains(&says), "{purpose:?}: {}", run.stderr);
        assert!(!hub.workspace("main").exists(), "nothing applied");
        store.release_lease().unwrap();
    }
    hub.applied();
}

#[test]
fn plan_against_an_exported_snapshot() {
    let hub = Hub::new();
    two_agents(&hub);
    hub.applied();
    let snapshot = hub.state.with_extension("snapshot.json");
    std::fs::write(&snapshot, hub.export().to_string()).unwrap();
    // The export shows the references, and not their values even when they are set
    // (tests/secrets.rs takes real values through every output).
    let values = [
        ("TG_TOKEN", "secret-value"),
        ("SLACK_TOKEN", "secret-value"),
    ];
    let export = hub.run_env(&["state", "export"], &values);
    assert_eq!(export.code, 0, "{}", export.stderr);
    assert!(
        export.stdout.contains(r#""id": "TG_TOKEN""#),
        "{}",
        export.stdout
    );
    assert!(!export.stdout.contains("secret-value"));
    hub.agents(&[
        agent("main", ""),
        agent(
            "research",
            "      identity: {name: Research, emoji: \"🔎\"}\n",
        ),
        agent("new", ""),
    ]);
    let plan = hub.run(&["plan", "--live", snapshot.to_str().unwrap(), "--json"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let doc: Value = serde_json::from_str(&plan.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    assert_eq!(doc["summary"]["add"], 1);
    assert_eq!(doc["actions"][0]["action"], "create-agent");
    assert_eq!(doc["actions"][0]["id"], "new");
}

#[test]
fn a_config_with_errors_plans_nothing() {
    let hub = Hub::new();
    hub.agents(&[agent("main", ""), agent("main", "")]);
    let run = hub.run(&["plan"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("duplicate-agent-id"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
}

// ---- crash safety ----

/// The state and the files, with what legitimately differs between runs (times, the serial,
/// trash entry names, the history) taken out.
fn fingerprint(hub: &Hub) -> (Value, BTreeMap<String, String>) {
    let mut state = hub.export();
    for key in ["lineage", "serial"] {
        state.as_object_mut().unwrap().remove(key);
    }
    for agent in state["agents"].as_array_mut().unwrap() {
        agent.as_object_mut().unwrap().remove("appliedSerial");
    }
    for r in state["runtimes"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("updatedAt");
    }
    if let Some(r) = state["routing"].as_object_mut() {
        r.remove("publishedAt");
    }
    let mut entries = Vec::new();
    for t in state["trash"].as_array_mut().unwrap() {
        let entry = t["entry"].as_str().unwrap().to_string();
        entries.push(entry);
        let t = t.as_object_mut().unwrap();
        for key in ["entry", "dir", "createdAt", "serial"] {
            t.remove(key);
        }
        let manifest = t.get_mut("manifest").unwrap().as_object_mut().unwrap();
        manifest.remove("created_at");
        manifest.remove("serial");
    }
    let mut files = BTreeMap::new();
    walk(&hub.state, &hub.state, &mut files);
    let mut renamed = BTreeMap::new();
    for (path, hash) in files {
        let mut path = path;
        for (i, entry) in entries.iter().enumerate() {
            path = path.replace(entry.as_str(), &format!("<entry {i}>"));
        }
        if path.ends_with("manifest.json") {
            // Times and serials inside; the state comparison covers its items.
            renamed.insert(path, String::new());
        } else {
            renamed.insert(path, hash);
        }
    }
    (state, renamed)
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        if rel.starts_with("state.db") {
            continue;
        }
        if path.is_dir() {
            out.insert(format!("{rel}/"), String::new());
            walk(root, &path, out);
        } else {
            out.insert(rel, deepcli::hash::of(&std::fs::read(&path).unwrap()));
        }
    }
}

fn crash_scenario_before(hub: &Hub) {
    hub.agents(&[
        agent("main", "      identity: {name: Old}\n"),
        agent("a", ""),
        agent("b", ""),
        agent("gone", ""),
    ]);
    hub.bindings(BINDINGS.replace("research", "a").as_str());
}

fn crash_scenario_after(hub: &Hub) {
    hub.agents(&[
        agent("main", "      identity: {name: New}\n"),
        agent("a", ""),
        agent("b", ""),
        agent("fresh", ""),
    ]);
    hub.bindings("bindings:\n  - agentId: fresh\n    match: {channel: slack}\n");
}

/// Kills `apply` at every failpoint in turn; after each crash a second apply must converge to
/// exactly what an uninterrupted apply leaves.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it)"
)]
fn a_crash_at_any_step_converges_on_the_next_apply() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("hub");
    let reference = Hub::at(&root);
    crash_scenario_before(&reference);
    reference.applied();
    std::fs::write(reference.workspace("gone").join("notes.txt"), "keep me").unwrap();
    crash_scenario_after(&reference);
    reference.applied();
    let want = fingerprint(&reference);

    let mut crashed = 0;
    for n in 1.. {
        let hub = Hub::at(&root);
        crash_scenario_before(&hub);
        hub.applied();
        std::fs::write(hub.workspace("gone").join("notes.txt"), "keep me").unwrap();
        crash_scenario_after(&hub);
        let n = n.to_string();
        let run = hub.run_env(&["apply", "--auto-approve"], &[("DEEPCLI_FAILPOINT", &n)]);
        if run.code == 0 {
            break;
        }
        crashed += 1;
        assert!(
            run.stderr.contains("failpoint"),
            "failpoint {n}: {}",
            run.stderr
        );
        let resumed = hub.apply(&[]);
        assert_eq!(
            resumed.code, 0,
            "after failpoint {n}:\n{}\n{}",
            resumed.stdout, resumed.stderr
        );
        let got = fingerprint(&hub);
        assert_eq!(
            got.0,
            want.0,
            "state after crashing at failpoint {n} ({})",
            run.stderr.trim()
        );
        assert_eq!(
            got.1,
            want.1,
            "files after crashing at failpoint {n} ({})",
            run.stderr.trim()
        );
        let plan = hub.run(&["plan", "--detailed-exitcode"]);
        assert_eq!(
            plan.code, 0,
            "converged after failpoint {n}: {}",
            plan.stdout
        );
    }
    assert!(crashed >= 15, "only {crashed} failpoints were hit");
}

// ---- rendered output ----

fn snapshot_filters(hub: &Hub) -> Vec<(String, String)> {
    let root = hub.config.parent().unwrap().display().to_string();
    vec![
        (regex_escape(&root), "[HUB]".to_string()),
        (
            r"sha256:[0-9a-f]{64}".to_string(),
            "sha256:[HASH]".to_string(),
        ),
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}".to_string(),
            "[LINEAGE]".to_string(),
        ),
    ]
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[test]
fn plan_output() {
    let hub = Hub::new();
    crash_scenario_before(&hub);
    hub.applied();
    crash_scenario_after(&hub);
    std::fs::remove_file(hub.workspace("b").join("SOUL.md")).unwrap();
    let human = hub.run(&["plan", "--diff"]);
    let json = hub.run(&["plan", "--json"]);
    assert_eq!((human.code, json.code), (0, 0), "{}", human.stderr);
    let filters = snapshot_filters(&hub);
    let filters: Vec<(&str, &str)> = filters
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    insta::with_settings!({filters => filters}, {
        insta::assert_snapshot!("plan_human", human.stdout);
        insta::assert_snapshot!("plan_json", json.stdout);
    });
}

#[test]
fn a_dead_holders_lease_is_taken_over() {
    let hub = Hub::new();
    two_agents(&hub);
    let dir = deepcli::state::StateDir::new(&hub.state);
    drop(deepcli::state::StateStore::open(&dir).unwrap());
    // A holder on this host whose process is gone.
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.execute(
        "INSERT INTO lease (id, pid, host, process_start, purpose, acquired_at, heartbeat_at) VALUES (1, 999999999, ?1, '1', 'deepcli apply', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
        [deepcli::state::lease::hostname()],
    )
    .unwrap();
    drop(conn);
    hub.applied();
}

#[test]
fn a_state_from_a_newer_deepcli_is_refused() {
    let hub = Hub::new();
    two_agents(&hub);
    hub.applied();
    let conn = rusqlite::Connection::open(hub.state.join("state.db")).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let run = hub.run(&["plan"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("written by a newer deepcli (schema 99"),
        "{}",
        run.stderr
    );
    let run = hub.apply(&[]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("upgrade deepcli"), "{}", run.stderr);
}

/// Regression: a relative --state-dir recorded relative workspaces, which the trash guard then
/// refused (and which meant something else from another directory).
#[test]
fn a_relative_state_dir_records_absolute_paths() {
    let hub = Hub::new();
    two_agents(&hub);
    let root = hub.config.parent().unwrap();
    let out = Command::cargo_bin("deepcli")
        .unwrap()
        .current_dir(root)
        .env("HOME", &hub.home)
        .env_remove("DEEPCLI_STATE_DIR")
        .args([
            "--config",
            "config",
            "--state-dir",
            "state",
            "apply",
            "--auto-approve",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = hub.export();
    let workspace = state["agents"][0]["workspace"].as_str().unwrap();
    assert!(Path::new(workspace).is_absolute(), "{workspace}");
    assert!(hub.workspace("main").join("AGENTS.md").is_file());
}

/// The published plan does not depend on how `--config` is spelled: applied with an absolute
/// path, planned with a relative one, there is nothing to do.
#[test]
fn the_config_path_spelling_does_not_change_the_published_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("hub");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n",
    )
    .unwrap();
    std::fs::write(
        config.join("bindings.yaml"),
        "bindings:\n  - {agentId: main, match: {channel: cli}}\n",
    )
    .unwrap();
    let deepcli = |args: &[&str]| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("deepcli"))
            .current_dir(tmp.path())
            .args(["--state-dir", tmp.path().join("state").to_str().unwrap()])
            .args(args)
            .env("HOME", tmp.path())
            .output()
            .unwrap()
    };
    let applied = deepcli(&[
        "--config",
        config.to_str().unwrap(),
        "apply",
        "--auto-approve",
    ]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let planned = deepcli(&["--config", "hub", "plan", "--detailed-exitcode"]);
    assert_eq!(
        planned.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&planned.stdout)
    );
}
