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
    /// Set for every command the hub runs.
    env: Vec<(String, String)>,
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
            env: Vec::new(),
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
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
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

// ---- directories deepcli did not create ----

/// The `delete-agent` action for `id` in `plan --json`.
fn delete_action(plan_json: &str, id: &str) -> Value {
    let doc: Value = serde_json::from_str(plan_json).unwrap();
    doc["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "delete-agent" && a["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no delete of {id}: {plan_json}"))
}

fn trash_move<'a>(action: &'a Value, label: &str) -> &'a Value {
    action["moves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["label"] == label)
        .unwrap_or_else(|| panic!("no {label} in {action}"))
}

/// Regression (issue 15, item 3): a workspace that already existed (a user's project folder)
/// was moved to trash whole when its agent was deleted. Only the files deepcli wrote into it may
/// go, an edited one included, and the plan must say so.
#[test]
fn deleting_an_agent_with_an_adopted_workspace_moves_only_deepclis_files() {
    let hub = Hub::new();
    let project = hub.home.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("README.md"), "my project\n").unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").unwrap();
    let ws = format!("      workspace: {}\n", project.display());
    hub.agents(&[agent("main", ""), agent("a", ""), agent("ext", &ws)]);
    hub.applied();
    let written: Vec<&str> = deepcli::workspace::FILES
        .iter()
        .copied()
        .filter(|n| *n != "BOOTSTRAP.md")
        .collect();
    for name in &written {
        assert!(project.join(name).is_file(), "{name}");
    }
    assert!(
        !project.join("BOOTSTRAP.md").exists(),
        "not an empty folder"
    );
    let state = hub.export();
    let ext = state["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "ext")
        .unwrap();
    assert_eq!(ext["workspaceOrigin"], "adopted", "{ext}");
    assert_eq!(ext["agentDirOrigin"], "created", "{ext}");

    // The user edits one of deepcli's files and adds one of their own.
    std::fs::write(project.join("SOUL.md"), "edited by me\n").unwrap();
    std::fs::write(project.join("later.md"), "mine too\n").unwrap();
    hub.agents(&[agent("main", ""), agent("a", "")]);

    let plan = hub.run(&["plan"]);
    assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);
    let line = plan
        .stdout
        .lines()
        .find(|l| l.contains("- agent ext"))
        .unwrap_or_else(|| panic!("{}", plan.stdout));
    assert!(
        line.contains(
            "→ trash: agentDir, sessions; from workspace ~/project: AGENTS.md, SOUL.md (edited), "
        ),
        "{line}"
    );
    assert!(
        line.contains("(workspace existed before deepcli: kept)"),
        "{line}"
    );
    let json = hub.run(&["plan", "--json"]);
    let delete = delete_action(&json.stdout, "ext");
    let workspace = trash_move(&delete, "workspace");
    assert_eq!(workspace["origin"], "adopted", "{workspace}");
    assert_eq!(workspace["kept"], "existed before deepcli", "{workspace}");
    let files: Vec<(&str, &str)> = workspace["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["state"].as_str().unwrap()))
        .collect();
    let want: Vec<(&str, &str)> = written
        .iter()
        .map(|n| (*n, if *n == "SOUL.md" { "edited" } else { "written" }))
        .collect();
    assert_eq!(files, want);
    let agent_dir = trash_move(&delete, "agentDir");
    assert_eq!(agent_dir["origin"], "created");
    assert!(agent_dir.get("kept").is_none(), "{agent_dir}");

    let run = hub.applied();
    assert!(run.stdout.contains("Moved to trash"), "{}", run.stdout);
    assert!(project.is_dir(), "the project folder stays");
    assert_eq!(
        std::fs::read_to_string(project.join("README.md")).unwrap(),
        "my project\n"
    );
    assert!(project.join("src/main.rs").is_file());
    assert!(project.join("later.md").is_file());
    for name in &written {
        assert!(!project.join(name).exists(), "{name} went to trash");
    }
    assert!(!hub.state.join("agents/ext").exists(), "created dirs moved");

    let list = hub.run(&["trash", "list", "--json"]);
    let doc: Value = serde_json::from_str(&list.stdout).unwrap();
    let entry = doc["entries"][0]["entry"].as_str().unwrap().to_string();
    let item = doc["entries"][0]["manifest"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["label"] == "workspace")
        .unwrap()
        .clone();
    assert_eq!(item["original"], project.display().to_string(), "{item}");
    assert_eq!(item["files"].as_array().unwrap().len(), written.len());
    let stored = hub.state.join("trash").join(&entry).join("workspace");
    assert_eq!(
        std::fs::read_to_string(stored.join("SOUL.md")).unwrap(),
        "edited by me\n",
        "the edited file is in the trash, as edited"
    );
    let human = hub.run(&["trash", "list"]);
    assert!(
        human.stdout.contains(&format!(
            "workspace {}: AGENTS.md, SOUL.md",
            project.display()
        )),
        "{}",
        human.stdout
    );

    let restore = hub.run(&["trash", "restore", &entry]);
    assert_eq!(restore.code, 0, "{}{}", restore.stdout, restore.stderr);
    assert_eq!(
        std::fs::read_to_string(project.join("SOUL.md")).unwrap(),
        "edited by me\n"
    );
    for name in &written {
        assert!(project.join(name).is_file(), "{name} is back");
    }
    assert!(project.join("README.md").is_file() && project.join("later.md").is_file());
    assert!(!hub.state.join("trash").join(&entry).exists());
}

/// Regression: deleting an agent removed the parent of its agentDir when the moves left it
/// empty, even a directory that existed before deepcli.
#[test]
fn deleting_an_agent_never_removes_a_directory_it_did_not_create() {
    let hub = Hub::new();
    let bots = hub.home.join("bots");
    std::fs::create_dir_all(&bots).unwrap();
    let dir = format!("      agentDir: {}\n", bots.join("agent").display());
    hub.agents(&[agent("main", ""), agent("a", ""), agent("b", &dir)]);
    hub.applied();
    assert!(bots.join("agent").is_dir() && bots.join("sessions").is_dir());
    hub.agents(&[agent("main", ""), agent("a", "")]);
    let plan = hub.run(&["plan"]);
    assert!(
        plan.stdout
            .contains("→ trash: workspace, agentDir, sessions"),
        "deepcli made these: {}",
        plan.stdout
    );
    hub.applied();
    assert!(!bots.join("agent").exists() && !bots.join("sessions").exists());
    assert!(bots.is_dir(), "the folder deepcli found stays, even empty");
}

/// Regression (issue 15, item 3): system trees were refused only as `/` is, so an agent could be
/// bootstrapped into `/etc` or `/usr/share/…` and later move it to trash.
#[test]
fn a_system_tree_workspace_is_refused_at_plan() {
    let hub = Hub::new();
    let refused = [
        ("etc", "workspace", "/etc"),
        ("etcsub", "workspace", "/etc/deepcli/agents/x"),
        ("usr", "workspace", "/usr/share/agents/x"),
        ("var", "workspace", "/var"),
        ("varlib", "workspace", "/var/lib"),
        ("bin", "workspace", "/bin"),
        ("sbin", "workspace", "/sbin"),
        ("lib", "workspace", "/lib"),
        ("lib64", "workspace", "/lib64"),
        ("libx32", "agentDir", "/libx32"),
        ("boot", "workspace", "/boot/x"),
        ("opt", "workspace", "/opt"),
        ("srv", "workspace", "/srv"),
        ("proc", "workspace", "/proc/x"),
        ("sys", "workspace", "/sys"),
        ("dev", "workspace", "/dev/x"),
        ("run", "workspace", "/run/agents/x"),
        ("tmp", "workspace", "/tmp"),
        ("usrdir", "agentDir", "/usr/local/lib/agent"),
    ];
    let allowed = [
        ("srvok", "/srv/agents/x"),
        ("optok", "/opt/hub/agents/x"),
        ("varok", "/var/lib/deepcli/agents/x"),
    ];
    let mut list = vec![agent("main", "")];
    for (id, key, path) in refused {
        list.push(agent(id, &format!("      {key}: {path}\n")));
    }
    for (id, path) in allowed {
        list.push(agent(id, &format!("      workspace: {path}\n")));
    }
    let tmp_sub = hub.home.parent().unwrap().join("in-tmp");
    list.push(agent(
        "tmpok",
        &format!("      workspace: {}\n", tmp_sub.display()),
    ));
    hub.agents(&list);
    let plan = hub.run(&["plan"]);
    assert_eq!(plan.code, 1, "{}{}", plan.stdout, plan.stderr);
    let blocked = plan
        .stdout
        .split("Blocked:")
        .nth(1)
        .unwrap_or_else(|| panic!("not blocked: {}", plan.stdout));
    for (id, key, path) in refused {
        let line = blocked
            .lines()
            .find(|l| l.contains(&format!("agent `{id}`:")))
            .unwrap_or_else(|| panic!("{id} ({path}) was not refused:\n{blocked}"));
        assert!(line.contains(&format!("`{path}`")), "{line}");
        assert!(line.contains(key), "{line}");
        assert!(line.contains("system"), "{line}");
        assert!(line.contains("agents.yaml"), "says how to fix it: {line}");
    }
    for id in ["srvok", "optok", "varok", "tmpok"] {
        assert!(
            !blocked.contains(&format!("agent `{id}`")),
            "{id} is a fine place:\n{blocked}"
        );
    }
    assert!(!hub.state.join("state.db").exists(), "plan writes nothing");
}

/// Runs `script` with `sh` in a new user and mount namespace, where it may mount a tmpfs, with
/// the hub's environment; `$1` is the deepcli binary. `None` (the caller skips, saying so) where
/// this system does not allow such namespaces.
fn in_mount_namespace(hub: &Hub, script: &str) -> Option<std::process::Output> {
    let probe = std::process::Command::new("unshare")
        .args(["-rm", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: `unshare -rm` is not available here, so no mount can be made");
        return None;
    }
    let out = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(assert_cmd::cargo::cargo_bin("deepcli"))
        .env("HOME", &hub.home)
        .env("DEEPCLI_CONFIG", &hub.config)
        .env("DEEPCLI_STATE_DIR", &hub.state)
        .env("NO_COLOR", "1")
        .env_remove("DEEPCLI_FAILPOINT")
        .output()
        .unwrap();
    Some(out)
}

/// Regression (issue 15, item 3): a workspace that is a mount point, or that has a filesystem
/// mounted inside it, is refused: moving it could only empty the mounted filesystem.
#[test]
fn a_mount_point_workspace_is_refused() {
    let hub = Hub::new();
    let volume = hub.home.join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    let ws = format!("      workspace: {}\n", volume.display());
    hub.agents(&[agent("main", ""), agent("a", ""), agent("vol", &ws)]);
    let script = format!(
        "mount -t tmpfs tmpfs '{v}' || exit 99; \"$1\" apply --auto-approve; echo \"rc=$?\"; ls -A '{v}'",
        v = volume.display()
    );
    let Some(out) = in_mount_namespace(&hub, &script) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("rc=1"), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("`{}`", volume.display())) && stderr.contains("mount point"),
        "{stderr}"
    );
    assert!(
        stderr.contains("agent `vol`") && stderr.contains("workspace"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("AGENTS.md"),
        "nothing written into the mount: {stdout}"
    );
    assert!(
        !hub.workspace("main").exists(),
        "a blocked plan applies nothing"
    );

    // A workspace deepcli created, with a filesystem mounted inside it since.
    hub.agents(&[agent("main", ""), agent("a", ""), agent("data", "")]);
    hub.applied();
    let inner = hub.workspace("data").join("disk");
    std::fs::create_dir_all(&inner).unwrap();
    hub.agents(&[agent("main", ""), agent("a", "")]);
    let script = format!(
        "mount -t tmpfs tmpfs '{i}' || exit 99; echo kept > '{i}/file'; \"$1\" apply --auto-approve; echo \"rc=$?\"; ls -A '{i}'",
        i = inner.display()
    );
    let Some(out) = in_mount_namespace(&hub, &script) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("rc=1"), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("`{}`", inner.display())) && stderr.contains("mount point"),
        "{stderr}"
    );
    assert!(
        stdout.contains("file"),
        "the mounted filesystem is untouched: {stdout}"
    );
    assert!(
        hub.workspace("data").join("AGENTS.md").is_file(),
        "nothing moved"
    );
}

/// Regression (issue 15, item 3): a state written before deepcli recorded who created each
/// directory keeps working. Its default directories (under the state directory) count as
/// created; any other may have existed before, so it is kept and only deepcli's files move.
#[test]
fn a_state_from_before_directory_origins_is_migrated() {
    let hub = Hub::new();
    let project = hub.home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "mine\n").unwrap();
    std::fs::write(project.join("AGENTS.md"), "deepcli wrote this\n").unwrap();
    let old_ws = hub.workspace("old");
    for id in ["main", "a", "old", "ext"] {
        for dir in ["agent", "sessions"] {
            std::fs::create_dir_all(hub.state.join("agents").join(id).join(dir)).unwrap();
        }
        if id != "ext" {
            std::fs::create_dir_all(hub.workspace(id)).unwrap();
            std::fs::write(hub.workspace(id).join("AGENTS.md"), "deepcli wrote this\n").unwrap();
        }
    }
    // The state as deepcli wrote it before this change: schema 2, every `owns_*` 1.
    let conn = rusqlite::Connection::open(hub.state.join("state.db")).unwrap();
    conn.execute_batch(include_str!("../../src/state/schema.sql"))
        .unwrap();
    conn.execute_batch(include_str!("../../src/state/access.sql"))
        .unwrap();
    conn.execute_batch(
        "INSERT INTO meta (key, value) VALUES ('lineage', '11f061e0-efec-4c46-8428-2a376640962c'), ('serial', '3'), ('created_at', '2026-11-30T06:07:20Z'), ('created_by', 'deepcli 0.1.0');",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 2).unwrap();
    let hash = deepcli::hash::of(b"deepcli wrote this\n");
    for (id, workspace) in [
        ("main", hub.workspace("main")),
        ("a", hub.workspace("a")),
        ("old", old_ws.clone()),
        ("ext", project.clone()),
    ] {
        let agent_dir = hub.state.join("agents").join(id).join("agent");
        let sessions = hub.state.join("agents").join(id).join("sessions");
        conn.execute(
            "INSERT INTO agents (id, spec_hash, spec, workspace, agent_dir, sessions_dir, protect, owns_workspace, owns_agent_dir, owns_sessions, applied_serial) VALUES (?1, 'sha256:0', '{}', ?2, ?3, ?4, 0, 1, 1, 1, 3)",
            rusqlite::params![
                id,
                workspace.to_str().unwrap(),
                agent_dir.to_str().unwrap(),
                sessions.to_str().unwrap()
            ],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO bootstrap_files (agent_id, name, path, hash) VALUES (?1, 'AGENTS.md', ?2, ?3)",
            rusqlite::params![id, workspace.join("AGENTS.md").to_str().unwrap(), hash],
        )
        .unwrap();
    }
    drop(conn);

    let state = hub.export();
    let origins: Vec<(&str, &str, &str, &str)> = state["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap(),
                a["workspaceOrigin"].as_str().unwrap(),
                a["agentDirOrigin"].as_str().unwrap(),
                a["sessionsOrigin"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        origins,
        [
            ("a", "created", "created", "created"),
            ("ext", "unknown", "created", "created"),
            ("main", "created", "created", "created"),
            ("old", "created", "created", "created"),
        ]
    );

    hub.agents(&[agent("main", ""), agent("a", ""), agent("b", "")]);
    let plan = hub.run(&["plan", "--json"]);
    assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);
    let old = delete_action(&plan.stdout, "old");
    for label in ["workspace", "agentDir", "sessions"] {
        let m = trash_move(&old, label);
        assert_eq!(m["origin"], "created", "{m}");
        assert!(m.get("kept").is_none(), "{m}");
    }
    let ext = delete_action(&plan.stdout, "ext");
    let ws = trash_move(&ext, "workspace");
    assert_eq!(ws["origin"], "unknown", "{ws}");
    assert_eq!(ws["files"][0]["name"], "AGENTS.md", "{ws}");
    assert_eq!(trash_move(&ext, "agentDir")["origin"], "created");
    let human = hub.run(&["plan"]);
    assert!(
        human.stdout.contains(
            "workspace may have existed before deepcli (applied by an older version): kept"
        ),
        "{}",
        human.stdout
    );

    hub.applied();
    assert!(!old_ws.exists(), "a default workspace moves whole");
    assert!(project.join("README.md").is_file(), "the project stays");
    assert!(!project.join("AGENTS.md").exists(), "deepcli's file went");
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
    assert_eq!(doc["formatVersion"], "2");
    assert_eq!(doc["summary"]["add"], 1);
    assert_eq!(doc["actions"][0]["action"], "create-agent");
    assert_eq!(doc["actions"][0]["id"], "new");
}

/// A snapshot exported before directory origins were recorded (format 1, `owns*` flags) still
/// previews; its directories count as `unknown`, so a delete keeps them and moves the files.
#[test]
fn a_snapshot_from_before_directory_origins_still_previews() {
    let hub = Hub::new();
    hub.agents(&[agent("main", ""), agent("a", ""), agent("b", "")]);
    hub.applied();
    let mut state = hub.export();
    assert_eq!(state["formatVersion"], "3");
    state["formatVersion"] = "1".into();
    for a in state["agents"].as_array_mut().unwrap() {
        let a = a.as_object_mut().unwrap();
        for (old, new) in [
            ("workspaceOrigin", "ownsWorkspace"),
            ("agentDirOrigin", "ownsAgentDir"),
            ("sessionsOrigin", "ownsSessions"),
        ] {
            a.remove(old);
            a.insert(new.into(), true.into());
        }
    }
    let snapshot = hub.state.with_extension("snapshot.json");
    std::fs::write(&snapshot, state.to_string()).unwrap();
    hub.agents(&[agent("main", ""), agent("a", "")]);
    let plan = hub.run(&["plan", "--live", snapshot.to_str().unwrap(), "--json"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let delete = delete_action(&plan.stdout, "b");
    let workspace = trash_move(&delete, "workspace");
    assert_eq!(workspace["origin"], "unknown", "{workspace}");
    assert_eq!(
        workspace["files"].as_array().unwrap().len(),
        8,
        "{workspace}"
    );
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
        manifest.remove("createdAt");
        manifest.remove("serial");
    }
    let mut files = BTreeMap::new();
    walk(&hub.state, &hub.state, &mut files);
    // The adopted project folder, outside the state directory.
    walk(hub.config.parent().unwrap(), &hub.home, &mut files);
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

/// A project folder that existed before deepcli, with the user's own file in it.
fn project(hub: &Hub) -> PathBuf {
    hub.home.join("project")
}

/// `gone`'s workspace: outside the state directory, under the home that the crash test
/// treats as another filesystem.
fn elsewhere(hub: &Hub) -> PathBuf {
    hub.home.join("elsewhere/gone")
}

fn crash_scenario_before(hub: &Hub) {
    let project = project(hub);
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "the user's\n").unwrap();
    std::fs::write(
        hub.config.join("channels.yaml"),
        "channels:\n  telegram:\n    accounts:\n      default: {botToken: {source: env, id: TG_TOKEN}}\n      biz: {botToken: {source: env, id: TG_BIZ_TOKEN}}\n  slack:\n    accounts:\n      default: {botToken: {source: env, id: SLACK_TOKEN}}\n",
    )
    .unwrap();
    hub.agents(&[
        agent("main", "      identity: {name: Old}\n"),
        agent(
            "a",
            "      runtime: {kind: process, command: [sleep, \"600\"]}\n",
        ),
        agent(
            "b",
            "      runtime: {kind: acp, command: [deepcli, echo-agent]}\n",
        ),
        agent(
            "gone",
            &format!(
                "      workspace: {}\n      runtime: {{kind: process, command: [sleep, \"600\"]}}\n",
                elsewhere(hub).display()
            ),
        ),
        agent("ext", &format!("      workspace: {}\n", project.display())),
    ]);
    hub.bindings(BINDINGS.replace("research", "a").as_str());
}

/// What happens between the two applies: the user writes into `gone`'s workspace and edits a
/// bootstrap file in the adopted project folder.
fn crash_scenario_edits(hub: &Hub) {
    std::fs::write(elsewhere(hub).join("notes.txt"), "keep me").unwrap();
    std::fs::write(project(hub).join("SOUL.md"), "edited\n").unwrap();
}

/// Every kind of step: an identity update, a runtime changed and one removed, an agent added
/// with a runtime, two deleted (one with a workspace deepcli created, one from an adopted
/// folder), an account added, one changed, one removed, bindings and the routing plan.
fn crash_scenario_after(hub: &Hub) {
    std::fs::write(
        hub.config.join("channels.yaml"),
        "channels:\n  telegram:\n    accounts:\n      default: {name: Telegram main, botToken: {source: env, id: TG_TOKEN}}\n  slack:\n    accounts:\n      default: {botToken: {source: env, id: SLACK_TOKEN}}\n      ops: {botToken: {source: env, id: SLACK_OPS_TOKEN}}\n",
    )
    .unwrap();
    hub.agents(&[
        agent("main", "      identity: {name: New}\n"),
        agent(
            "a",
            "      runtime: {kind: process, command: [sleep, \"601\"]}\n",
        ),
        agent("b", ""),
        agent(
            "fresh",
            "      runtime: {kind: process, command: [sleep, \"600\"]}\n",
        ),
    ]);
    hub.bindings("bindings:\n  - agentId: fresh\n    match: {channel: slack}\n");
}

/// `cp -a from to`: modes and times kept.
fn copy_tree(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

impl Hub {
    /// Another handle on the same directories (no temp dir of its own).
    fn handle(&self) -> Hub {
        Hub {
            _tmp: None,
            config: self.config.clone(),
            state: self.state.clone(),
            home: self.home.clone(),
            env: self.env.clone(),
        }
    }
}

/// A hub for the crash test: its home counts as another filesystem, so what the deletes take
/// from it (`gone`'s workspace, `ext`'s files) travels by copy, verify and remove.
fn crash_hub(root: &Path) -> Hub {
    let mut hub = Hub::at(root);
    hub.env = vec![(
        "DEEPCLI_FAILPOINT_OTHER_FS".into(),
        hub.home.display().to_string(),
    )];
    hub
}

/// Every failpoint the crash scenario's second apply passes, in order: a failpoint that
/// vanishes, or one added, fails the test until this list says so.
const CRASH_POINTS: &[&str] = &[
    // The old binding, in a transaction of its own.
    r#"before:binding.remove:["route","telegram","*","",null,null,[]]"#,
    // An identity update; a runtime changed; a runtime removed; an agent added with one.
    "before:agent.update:main",
    "file:agent.update:main:IDENTITY.md",
    "after:agent.update:main",
    "before:agent.update:a",
    "after:agent.update:a",
    "before:agent.update:b",
    "after:agent.update:b",
    "before:agent.create:fresh",
    "file:agent.create:fresh:BOOTSTRAP.md",
    "file:agent.create:fresh:AGENTS.md",
    "file:agent.create:fresh:SOUL.md",
    "file:agent.create:fresh:IDENTITY.md",
    "file:agent.create:fresh:USER.md",
    "file:agent.create:fresh:TOOLS.md",
    "file:agent.create:fresh:HEARTBEAT.md",
    "file:agent.create:fresh:MEMORY.md",
    "after:agent.create:fresh",
    // The new binding and the accounts (changed, added, removed): one transaction.
    r#"before:binding.add:["route","slack","default","",null,null,[]]"#,
    "before:account.change:telegram:default",
    "before:account.add:slack:ops",
    "before:account.remove:telegram:biz",
    // `ext`: deepcli's files leave the adopted project one by one, each by copy; its
    // agentDir and sessions are renamed.
    "before:agent.delete:ext",
    "trash.entry:ext",
    "trash.manifest:ext",
    "trash.stored:workspace",
    "trash.copy.staged:AGENTS.md",
    "trash.copy.renamed:AGENTS.md",
    "trash.moved:workspace/AGENTS.md",
    "trash.copy.staged:SOUL.md",
    "trash.copy.renamed:SOUL.md",
    "trash.moved:workspace/SOUL.md",
    "trash.copy.staged:IDENTITY.md",
    "trash.copy.renamed:IDENTITY.md",
    "trash.moved:workspace/IDENTITY.md",
    "trash.copy.staged:USER.md",
    "trash.copy.renamed:USER.md",
    "trash.moved:workspace/USER.md",
    "trash.copy.staged:TOOLS.md",
    "trash.copy.renamed:TOOLS.md",
    "trash.moved:workspace/TOOLS.md",
    "trash.copy.staged:HEARTBEAT.md",
    "trash.copy.renamed:HEARTBEAT.md",
    "trash.moved:workspace/HEARTBEAT.md",
    "trash.copy.staged:MEMORY.md",
    "trash.copy.renamed:MEMORY.md",
    "trash.moved:workspace/MEMORY.md",
    "trash.moved:agentDir",
    "trash.moved:sessions",
    "after:agent.delete:ext",
    // `gone`: its workspace is copied whole; agentDir and sessions are renamed.
    "before:agent.delete:gone",
    "trash.entry:gone",
    "trash.manifest:gone",
    "trash.copy.partial:workspace",
    "trash.copy.staged:workspace",
    "trash.copy.renamed:workspace",
    "trash.copy.removing:workspace",
    "trash.moved:workspace",
    "trash.moved:agentDir",
    "trash.moved:sessions",
    "after:agent.delete:gone",
    // The routing plan.
    "before:routing.publish:2",
    "after:routing.publish:2",
];

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
    // The hub as the second apply finds it, made once; each run starts from a copy of it at
    // the same path (the state records absolute paths).
    let pristine = base.path().join("pristine");
    let hub = crash_hub(&root);
    crash_scenario_before(&hub);
    hub.applied();
    crash_scenario_edits(&hub);
    crash_scenario_after(&hub);
    copy_tree(&root, &pristine);
    let fresh = || {
        std::fs::remove_dir_all(&root).unwrap();
        copy_tree(&pristine, &root);
        hub.handle()
    };

    let reference = fresh();
    reference.applied();
    let left: Vec<_> = std::fs::read_dir(project(&reference))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["README.md"], "only deepcli's files left the project");
    assert!(
        !elsewhere(&reference).exists(),
        "gone's workspace went to trash"
    );
    let want = fingerprint(&reference);

    let mut points = Vec::new();
    for n in 1.. {
        let hub = fresh();
        let n = n.to_string();
        let run = hub.run_env(&["apply", "--auto-approve"], &[("DEEPCLI_FAILPOINT", &n)]);
        if run.code == 0 {
            break;
        }
        let name = run
            .stderr
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!("failpoint {n} `"))?
                    .strip_suffix("`: aborting")
            })
            .unwrap_or_else(|| panic!("apply {n} failed, not at failpoint {n}: {}", run.stderr));
        points.push(name.to_string());
        let resumed = hub.apply(&[]);
        assert_eq!(
            resumed.code, 0,
            "after failpoint {n}:\n{}\n{}",
            resumed.stdout, resumed.stderr
        );
        let got = fingerprint(&hub);
        assert_eq!(
            got.0, want.0,
            "state after crashing at failpoint {n} ({name})"
        );
        assert_eq!(
            got.1, want.1,
            "files after crashing at failpoint {n} ({name})"
        );
        let plan = hub.run(&["plan", "--detailed-exitcode"]);
        assert_eq!(
            plan.code, 0,
            "converged after failpoint {n} ({name}): {}",
            plan.stdout
        );
    }
    assert_eq!(points, CRASH_POINTS, "the failpoints passed, in order");
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
        [deepcli::os::hostname()],
    )
    .unwrap();
    drop(conn);
    hub.applied();
}

/// Writes the lease row as a holder left it: `pid` on `host`, started at `start`, its last
/// heartbeat `quiet_for` ago.
fn plant_lease(
    dir: &deepcli::state::StateDir,
    pid: u32,
    host: &str,
    start: &str,
    quiet_for: std::time::Duration,
) {
    let heartbeat = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::try_from(quiet_for).unwrap())
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    conn.execute(
        "INSERT OR REPLACE INTO lease (id, pid, host, process_start, purpose, acquired_at, heartbeat_at) VALUES (1, ?1, ?2, ?3, 'deepcli up', ?4, ?4)",
        rusqlite::params![pid, host, start, heartbeat],
    )
    .unwrap();
}

/// A holder is dead, and its lease taken over, when its pid now names another process (same
/// pid, another start time), or when it is on another host and has not renewed for 60 s.
/// The same rows with the holder still alive (its own start time; a recent heartbeat) are
/// refused, so neither takeover is a lease that never held.
#[test]
fn a_lease_is_taken_over_when_the_holders_pid_was_reused_or_its_host_went_quiet() {
    use deepcli::state::{LeasePurpose, StateError, StateStore};
    use std::time::Duration;
    let hub = Hub::new();
    two_agents(&hub);
    let dir = deepcli::state::StateDir::new(&hub.state);
    drop(StateStore::open(&dir).unwrap());
    // A live process of this host: the pid every planted holder claims.
    struct Live(std::process::Child);
    impl Drop for Live {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let live = Live(
        std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap(),
    );
    let pid = live.0.id();
    let start = deepcli::os::process_start(pid).unwrap();
    let here = deepcli::os::hostname();
    let elsewhere = format!("{here}-not");
    for (what, host, start, quiet, taken_over) in [
        (
            "this host, the holder itself",
            &here,
            start.as_str(),
            0,
            false,
        ),
        ("this host, its pid reused", &here, "1", 0, true),
        ("another host, renewed 30 s ago", &elsewhere, "1", 30, false),
        (
            "another host, quiet for 2 min",
            &elsewhere,
            start.as_str(),
            120,
            true,
        ),
    ] {
        plant_lease(&dir, pid, host, start, Duration::from_secs(quiet));
        let mut store = StateStore::open(&dir).unwrap();
        match store.acquire_lease(LeasePurpose::Apply, Duration::ZERO) {
            Ok(()) => {
                assert!(taken_over, "{what}: a live holder's lease was taken");
                let holder = store.lease_holder().unwrap();
                assert_eq!(
                    holder.map(|h| (h.pid, h.host)),
                    Some((std::process::id(), here.clone())),
                    "{what}: the new holder is on record"
                );
                store.release_lease().unwrap();
            }
            Err(StateError::Locked(holder)) => {
                assert!(!taken_over, "{what}: a dead holder kept the lease");
                assert_eq!((holder.pid, &holder.host), (pid, host), "{what}");
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }

    // The binary takes both dead holders' leases over, and applies.
    plant_lease(&dir, pid, &here, "1", Duration::ZERO);
    hub.applied();
    plant_lease(&dir, pid, &elsewhere, &start, Duration::from_secs(120));
    std::fs::remove_dir_all(hub.workspace("main")).unwrap();
    let run = hub.applied();
    assert!(run.stdout.contains("recreate"), "{}", run.stdout);
    assert!(hub.workspace("main").join("AGENTS.md").exists());
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

/// Every file and directory under `dir`, with its bytes and mode: what "nothing was changed"
/// compares.
fn contents(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let bytes = if meta.is_dir() {
                dirs.push(path.clone());
                Vec::new()
            } else {
                std::fs::read(&path).unwrap()
            };
            out.insert(path, (bytes, meta.permissions().mode() & 0o7777));
        }
    }
    out
}

/// A `state.db` that cannot be the state is refused by every command that reads it: exit 2, the
/// file and what is wrong with it named, the recovery steps pointed at, and nothing changed.
fn assert_refused(hub: &Hub, what: &str) {
    let before = contents(&hub.state);
    let db = hub.state.join("state.db");
    let commands: [&[&str]; 6] = [
        &["plan"],
        &["apply", "--auto-approve"],
        &["status"],
        &["history"],
        &["state", "export"],
        &["trash", "restore", "main-20260101T000000Z"],
    ];
    for args in commands {
        let run = hub.run(args);
        assert_eq!(
            run.code, 2,
            "{what}: {args:?}:\n{}{}",
            run.stdout, run.stderr
        );
        assert!(
            run.stderr
                .contains(&format!("state database `{}` {what}", db.display())),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains("see docs/state.md#an-empty-or-damaged-statedb"),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(
            contents(&hub.state),
            before,
            "{what}: {args:?} changed the state directory"
        );
    }
    // With --detailed-exitcode, 2 means "changes to apply": a plan that could not run is 1.
    let run = hub.run(&["plan", "--detailed-exitcode"]);
    assert_eq!(run.code, 1, "{what}: {}", run.stderr);
}

/// Regression: a zero-byte state.db was a fresh start: `plan` showed every agent as new and
/// wrote a new database into the file, `apply` started a new lineage.
#[test]
fn an_empty_state_db_is_an_error_not_a_fresh_start() {
    let hub = Hub::new();
    two_agents(&hub);
    std::fs::create_dir_all(&hub.state).unwrap();
    std::fs::write(hub.state.join("state.db"), "").unwrap();
    assert_refused(&hub, "is empty (0 bytes)");
    assert!(!hub.workspace("main").exists(), "nothing was applied");
    // The controller refuses it too, before it serves or applies anything.
    let out = Command::cargo_bin("deepcli")
        .unwrap()
        .env("HOME", &hub.home)
        .env("DEEPCLI_CONFIG", &hub.config)
        .env("DEEPCLI_STATE_DIR", &hub.state)
        .args(["up", "--listen", "127.0.0.1:0"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(hub.state.join("state.db")).unwrap(), b"");
}

/// Regression: garbage, a cut-off database and another program's SQLite file were opened as
/// the state: SQLite errors with exit 1 at best, and the other program's database got
/// deepcli's tables written into it.
#[test]
fn a_state_db_that_is_not_a_deepcli_state_is_an_error_and_stays_untouched() {
    let hub = Hub::new();
    two_agents(&hub);
    hub.applied();
    let db = hub.state.join("state.db");
    let good = std::fs::read(&db).unwrap();
    assert!(good.len() >= 4 * 4096, "{} bytes", good.len());

    std::fs::write(
        &db,
        "these are not the bytes you are looking for\n".repeat(100),
    )
    .unwrap();
    assert_refused(&hub, "is not an SQLite database");

    std::fs::write(&db, &good[..60]).unwrap();
    assert_refused(
        &hub,
        "is truncated: 60 bytes, shorter than an SQLite header",
    );

    let half = good.len() / 2;
    std::fs::write(&db, &good[..half]).unwrap();
    assert_refused(
        &hub,
        &format!(
            "is truncated: {half} bytes, where its header says {}",
            good.len()
        ),
    );

    std::fs::remove_file(&db).unwrap();
    let other = rusqlite::Connection::open(&db).unwrap();
    other
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('mine');")
        .unwrap();
    drop(other);
    assert_refused(
        &hub,
        "is an SQLite database but not a deepcli state (it has no `meta` table with a lineage)",
    );

    // The database deleted, its write-ahead log left: SQLite would replay the log onto the next
    // new database.
    std::fs::remove_file(&db).unwrap();
    std::fs::write(hub.state.join("state.db-wal"), &good[..4096]).unwrap();
    assert_refused(
        &hub,
        "is missing, but its write-ahead log `state.db-wal` is there",
    );
    std::fs::remove_file(hub.state.join("state.db-wal")).unwrap();

    // Damage past what opening reads is found when the page is read: the same exit and hint.
    std::fs::write(&db, &good).unwrap();
    let page: u64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 'agents'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mut damaged = good.clone();
    let at = (page as usize - 1) * 4096;
    damaged[at..at + 4096].fill(0xff);
    std::fs::write(&db, &damaged).unwrap();
    for args in [&["plan"][..], &["state", "export"]] {
        let run = hub.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "state database `{}`: database disk image is malformed",
                db.display()
            )) && run
                .stderr
                .contains("see docs/state.md#an-empty-or-damaged-statedb"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

/// Regression: state.db, its WAL and shared memory, the logs and the trash were 0644/0755
/// (transcripts are in the database): the files deepcli keeps are private to their owner when
/// created, and made so when found otherwise.
#[test]
fn state_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    // The usual umask, under which files are created world-readable unless asked otherwise.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let hub = Hub::new();
    hub.agents(&[agent("main", ""), agent("research", ""), agent("extra", "")]);
    hub.bindings(BINDINGS);
    hub.applied();
    hub.agents(&[agent("main", ""), agent("research", "")]);
    hub.applied();
    let state = &hub.state;
    let db = state.join("state.db");
    // A reader's connection makes SQLite create the WAL and shared memory files, with the
    // database's mode.
    let reader = rusqlite::Connection::open(&db).unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM agents", [], |r| r.get(0))
        .unwrap();
    let private_files = [
        "state.db",
        "state.db-wal",
        "state.db-shm",
        "routing-plan.json",
    ];
    for name in private_files {
        assert_eq!(mode(&state.join(name)), 0o600, "{name} when created");
    }
    assert_eq!(mode(state), 0o700, "the state directory when created");
    assert_eq!(mode(&state.join("trash")), 0o700, "trash/ when created");

    // Made by an older deepcli, or loosened by hand: fixed on the next open (even a plan's).
    let loosen = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    std::fs::create_dir_all(state.join("logs/channels")).unwrap();
    std::fs::write(state.join("logs/worker.log"), "out\n").unwrap();
    std::fs::write(state.join("logs/worker.log.1"), "older\n").unwrap();
    std::fs::write(state.join("logs/channels/slack.log"), "in\n").unwrap();
    std::fs::write(state.join("operator-token"), "t0ken").unwrap();
    let loose_files = [
        "state.db",
        "state.db-wal",
        "state.db-shm",
        "routing-plan.json",
        "operator-token",
        "logs/worker.log",
        "logs/worker.log.1",
        "logs/channels/slack.log",
    ];
    let loose_dirs = ["trash", "logs", "logs/channels"];
    for name in loose_files {
        loosen(&state.join(name), 0o644);
    }
    for name in loose_dirs {
        loosen(&state.join(name), 0o755);
    }
    loosen(state, 0o755);
    let plan = hub.run(&["plan"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    for name in loose_files {
        assert_eq!(mode(&state.join(name)), 0o600, "{name} after an open");
    }
    for name in loose_dirs {
        assert_eq!(mode(&state.join(name)), 0o700, "{name}/ after an open");
    }
    assert_eq!(
        mode(state),
        0o755,
        "an existing state directory keeps its mode: it may be anyone's directory"
    );
    // Workspaces are the operator's: they keep whatever mode they have.
    assert_eq!(mode(&hub.workspace("main")), 0o755);
    drop(reader);
}
