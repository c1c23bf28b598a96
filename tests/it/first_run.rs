//! The rough edges a new user hits between the first run and daily use (issue 17): a plan saved
//! under a bare file name, commands that fail without creating anything, an empty config
//! directory, and guards that say how to proceed where the reader is.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

struct Hub {
    tmp: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

const CHANNELS: &str = "channels:\n  telegram:\n    accounts:\n      default: {botToken: {source: env, id: TG_TOKEN}}\n";

fn agents(ids: &[&str]) -> String {
    let list: String = ids.iter().map(|id| format!("    - id: {id}\n")).collect();
    format!("agents:\n  list:\n{list}")
}

impl Hub {
    /// A config of `main` and `research` and a state directory that does not exist yet.
    fn new() -> Hub {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        let state = tmp.path().join("state");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let hub = Hub {
            tmp,
            config,
            state,
            home,
        };
        hub.write("channels.yaml", CHANNELS);
        hub.write("agents.yaml", &agents(&["main", "research"]));
        hub.write(
            "bindings.yaml",
            "bindings:\n  - agentId: research\n    match: {channel: telegram}\n",
        );
        hub
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.config.join(name), text).unwrap();
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_in(self.tmp.path(), args)
    }

    /// `deepcli ARGS` in the working directory `cwd`.
    fn run_in(&self, cwd: &Path, args: &[&str]) -> Run {
        let out = Command::cargo_bin("deepcli")
            .unwrap()
            .current_dir(cwd)
            .env("HOME", &self.home)
            .env("DEEPCLI_CONFIG", &self.config)
            .env("DEEPCLI_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .env_remove("DEEPCLI_FAILPOINT")
            .env_remove("DEEPCLI_OPERATOR_TOKEN")
            .args(args)
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// `plan --out plan.json` as gitops.md shows it: a bare file name is in the current directory
/// (its parent is the empty path), and `plan --out plan.json && apply plan.json` works.
#[test]
fn plan_out_to_a_bare_file_name_saves_and_applies() {
    let hub = Hub::new();
    let cwd = hub.tmp.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let plan = hub.run_in(&cwd, &["plan", "--out", "plan.json"]);
    assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);
    assert_eq!(plan.stderr, "");
    assert!(cwd.join("plan.json").is_file());
    let leftovers: Vec<_> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["plan.json"], "no temporary file is left");
    let apply = hub.run_in(&cwd, &["apply", "plan.json"]);
    assert_eq!(apply.code, 0, "{}{}", apply.stdout, apply.stderr);
    assert!(apply.stdout.contains("Applied:"), "{}", apply.stdout);
}

/// A directory that does not exist: the error names the file, not a temporary one.
#[test]
fn plan_out_into_a_missing_directory_names_the_file() {
    let hub = Hub::new();
    let out = hub.tmp.path().join("missing/plan.json");
    let plan = hub.run(&["plan", "--out", out.to_str().unwrap()]);
    assert_eq!(plan.code, 1);
    assert_eq!(
        plan.stderr,
        format!(
            "error: cannot write `{}`: No such file or directory (os error 2)\n",
            out.display()
        )
    );
}

/// Every path under `dir` (relative, sorted), with the size of each file: what a command
/// created or removed shows as a difference. Empty when `dir` does not exist.
fn listing(dir: &Path) -> Vec<(PathBuf, Option<u64>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Option<u64>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_dir() {
                out.push((rel, None));
                walk(root, &path, out);
            } else {
                // The database's size changes with what is written in it, not with a read.
                let size = (rel != Path::new("state.db")).then_some(meta.len());
                out.push((rel, size));
            }
        }
    }
    let mut out = Vec::new();
    if dir.exists() {
        out.push((PathBuf::new(), None));
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

/// Where a command that fails is run: no state directory yet, or one an apply made (with no
/// operator token: only a server creates one).
#[derive(Clone, Copy, Debug)]
enum Start {
    NoState,
    Applied,
}

impl Hub {
    fn at(start: Start) -> Hub {
        let hub = Hub::new();
        if let Start::Applied = start {
            let run = hub.run(&["apply", "--auto-approve"]);
            assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        }
        hub
    }

    /// Runs `args`, which must fail with `code`, and checks that the state directory is as it
    /// was: nothing created, nothing removed.
    fn fails_creating_nothing(&self, args: &[&str], code: i32) -> Run {
        let before = listing(&self.state);
        let run = self.run(args);
        assert_eq!(run.code, code, "{args:?}:\n{}{}", run.stdout, run.stderr);
        assert_eq!(
            listing(&self.state),
            before,
            "{args:?} changed the state directory:\n{}",
            run.stderr
        );
        run
    }
}

/// Regression: `up --config <missing dir>` created the state directory, `state.db` and an
/// operator token, then failed with a raw notify error. It checks the directory first and exits
/// 2, as `validate` does.
#[test]
fn up_on_a_missing_config_directory_creates_nothing() {
    for start in [Start::NoState, Start::Applied] {
        let hub = Hub::at(start);
        let missing = hub.tmp.path().join("missing");
        let run = hub.fails_creating_nothing(
            &[
                "--config",
                missing.to_str().unwrap(),
                "up",
                "--listen",
                "127.0.0.1:0",
            ],
            2,
        );
        assert_eq!(
            run.stderr,
            format!(
                "error: config directory `{}` does not exist\nhint: pass the config directory with --config DIR (or DEEPCLI_CONFIG)\n",
                missing.display()
            ),
            "{start:?}"
        );
    }
}

#[test]
fn up_that_cannot_listen_creates_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for start in [Start::NoState, Start::Applied] {
        let hub = Hub::at(start);
        let run = hub.fails_creating_nothing(&["up", "--listen", &addr], 1);
        assert!(
            run.stderr
                .contains("pass another address with --listen ADDR")
        );
        assert!(
            run.stderr
                .contains(&format!("error: cannot listen on {addr}")),
            "{start:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn access_serve_that_cannot_listen_creates_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let hub = Hub::at(Start::Applied);
    let plan = hub.state.join("routing-plan.json");
    let plan = plan.to_str().unwrap();
    let run =
        hub.fails_creating_nothing(&["access", "serve", "--plan", plan, "--listen", &addr], 1);
    assert!(run.stderr.contains("cannot listen on"), "{}", run.stderr);
    let missing = hub.tmp.path().join("missing.json");
    hub.fails_creating_nothing(&["access", "serve", "--plan", missing.to_str().unwrap()], 1);
}

/// A refused apply, whatever refused it, creates no `state.db`: the state is made only when a
/// plan is applied.
#[test]
fn a_refused_apply_creates_nothing() {
    let hub = Hub::at(Start::NoState);
    let run = hub.fails_creating_nothing(&["apply"], 1);
    assert!(
        run.stderr.contains("no terminal to confirm on"),
        "{}",
        run.stderr
    );
    let missing = hub.tmp.path().join("missing");
    hub.fails_creating_nothing(
        &[
            "--config",
            missing.to_str().unwrap(),
            "apply",
            "--auto-approve",
        ],
        2,
    );
    let stale = hub.tmp.path().join("stale.json");
    assert_eq!(hub.run(&["plan", "--out", stale.to_str().unwrap()]).code, 0);
    hub.write("agents.yaml", &agents(&["main", "research", "ops"]));
    let run = hub.fails_creating_nothing(&["apply", stale.to_str().unwrap()], 1);
    assert!(
        run.stderr.contains("the saved plan is stale"),
        "{}",
        run.stderr
    );
    hub.write(
        "bindings.yaml",
        "bindings:\n  - agentId: nobody\n    match: {channel: telegram}\n",
    );
    hub.fails_creating_nothing(&["apply", "--auto-approve"], 1);

    // On an applied state: a blocked plan and an unconfirmed one change nothing on disk.
    let hub = Hub::new();
    hub.write("agents.yaml", &agents(&["main", "research", "ops"]));
    assert_eq!(hub.run(&["apply", "--auto-approve"]).code, 0);
    hub.write("agents.yaml", &agents(&["main"]));
    hub.write("bindings.yaml", "bindings: []\n");
    let run = hub.fails_creating_nothing(&["apply", "--auto-approve"], 1);
    assert!(run.stderr.contains("the plan is blocked"), "{}", run.stderr);
    hub.fails_creating_nothing(&["apply", "--allow-mass-delete"], 1);
}

#[test]
fn a_failed_trash_restore_creates_nothing() {
    for start in [Start::NoState, Start::Applied] {
        let hub = Hub::at(start);
        let run = hub.fails_creating_nothing(&["trash", "restore", "main-20260101T000000Z"], 1);
        assert!(
            run.stderr
                .contains("no trash entry named `main-20260101T000000Z`"),
            "{start:?}: {}",
            run.stderr
        );
    }
}

/// `trash list` on a directory with no state exits as `history` does (gitops.md's exit codes).
#[test]
fn reading_commands_on_a_missing_state_create_nothing_and_agree() {
    let hub = Hub::at(Start::NoState);
    let expected = format!(
        "error: no deepcli state in `{}`; run `deepcli apply` first, or pass --state-dir\n",
        hub.state.display()
    );
    for args in [
        &["history"][..],
        &["history", "--json"],
        &["state", "export"],
        &["trash", "list"],
        &["trash", "list", "--json"],
    ] {
        let run = hub.fails_creating_nothing(args, 1);
        assert_eq!(run.stderr, expected, "{args:?}");
        assert_eq!(run.stdout, "", "{args:?}");
    }
    // `status` is a health check: no state means it cannot tell (2).
    for args in [&["status"][..], &["status", "--json"]] {
        let run = hub.fails_creating_nothing(args, 2);
        assert!(
            run.stderr.starts_with("error: no deepcli state in"),
            "{}",
            run.stderr
        );
    }
    // `channels status` fails for the accounts whose credentials this shell lacks, and like
    // `agents list` makes nothing.
    for (args, code) in [
        (&["agents", "list", "--json"][..], 0),
        (&["channels", "status", "--json"], 1),
    ] {
        let run = hub.run(args);
        assert_eq!(run.code, code, "{args:?}: {}", run.stderr);
        assert!(!hub.state.exists(), "{args:?} made the state directory");
    }
}

/// When state.db was lost, the trash still lists and restores (state.md), and restoring makes
/// no new state: there is nothing to lease or record.
#[test]
fn trash_restore_without_a_state_db_creates_none() {
    let hub = Hub::at(Start::Applied);
    hub.write("agents.yaml", &agents(&["main"]));
    hub.write("bindings.yaml", "bindings: []\n");
    let run = hub.run(&["apply", "--auto-approve"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(hub.state.join(name));
    }
    assert!(!hub.state.join("workspaces/research").exists());
    let list = hub.run(&["trash", "list", "--json"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let doc: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let entry = doc["entries"][0]["entry"].as_str().unwrap().to_string();
    let restore = hub.run(&["trash", "restore", &entry]);
    assert_eq!(restore.code, 0, "{}", restore.stderr);
    assert!(hub.state.join("workspaces/research/SOUL.md").is_file());
    assert!(!hub.state.join("state.db").exists(), "no state was made");
}

#[test]
fn plan_and_validate_that_fail_create_nothing() {
    for start in [Start::NoState, Start::Applied] {
        let hub = Hub::at(start);
        let missing = hub.tmp.path().join("missing");
        let missing = missing.to_str().unwrap();
        hub.fails_creating_nothing(&["--config", missing, "plan"], 2);
        hub.fails_creating_nothing(&["--config", missing, "validate"], 2);
        let nowhere = hub.tmp.path().join("missing/plan.json");
        hub.fails_creating_nothing(&["plan", "--out", nowhere.to_str().unwrap()], 1);
        hub.fails_creating_nothing(&["--config", missing, "route", "--channel", "telegram"], 2);
    }
}

#[test]
fn refused_management_edits_create_nothing() {
    for start in [Start::NoState, Start::Applied] {
        let hub = Hub::at(start);
        let config = listing(&hub.config);
        hub.fails_creating_nothing(&["agents", "add", "ops", "--bind", "nowhere"], 1);
        hub.fails_creating_nothing(&["agents", "delete", "nobody", "--force"], 1);
        hub.fails_creating_nothing(&["channels", "remove", "--channel", "nowhere"], 1);
        assert_eq!(
            listing(&hub.config),
            config,
            "{start:?}: no config file written"
        );
    }
}

/// Regression: `plan` in a directory with no config planned `+ agent main` with only a warning
/// (a wrong `--config` looks like this). `plan`, `apply` and `up` refuse it, creating nothing,
/// unless `--allow-empty`; `validate` still only warns (an empty directory declares nothing
/// wrong).
#[test]
fn an_empty_config_directory_is_refused_unless_allowed() {
    let hub = Hub::at(Start::NoState);
    let empty = hub.tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let empty = empty.to_str().unwrap();
    for args in [
        &["--config", empty, "plan"][..],
        &["--config", empty, "apply", "--auto-approve"],
        &["--config", empty, "up", "--listen", "127.0.0.1:0"],
    ] {
        let run = hub.fails_creating_nothing(args, 2);
        assert!(
            run.stderr.starts_with(&format!(
                "error: config directory `{empty}` has none of agents.yaml, channels.yaml, bindings.yaml; nothing was"
            )),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("pass --allow-empty"), "{}", run.stderr);
    }
    let detailed =
        hub.fails_creating_nothing(&["--config", empty, "plan", "--detailed-exitcode"], 1);
    assert!(
        detailed.stderr.contains("has none of"),
        "{}",
        detailed.stderr
    );
    let allowed = hub.run(&["--config", empty, "plan", "--allow-empty"]);
    assert_eq!(allowed.code, 0, "{}", allowed.stderr);
    assert!(
        allowed.stdout.contains("+ agent main"),
        "{}",
        allowed.stdout
    );
    // validate fails on it (a CI job pointed at the wrong directory), unless told.
    let validate = hub.run(&["--config", empty, "validate"]);
    assert_eq!(validate.code, 1);
    assert!(
        validate.stdout.contains("warning[nothing-declared]"),
        "{}",
        validate.stdout
    );
    let validate = hub.run(&["--config", empty, "validate", "--allow-empty"]);
    assert_eq!(validate.code, 0, "{}", validate.stdout);
    let applied = hub.run(&[
        "--config",
        empty,
        "apply",
        "--auto-approve",
        "--allow-empty",
    ]);
    assert_eq!(applied.code, 0, "{}", applied.stderr);
}

/// `up --allow-empty` runs on an empty directory; without it, a directory emptied while the
/// controller runs is a rejected edit: nothing is deleted, and the rejection says how to go on.
#[test]
fn up_on_an_emptied_config_directory_rejects_it_unless_allowed() {
    use crate::common::Up;
    let up = Up::start_files(&[], |c| {
        c.arg("--allow-empty");
    });
    up.wait_for("main applied", |s| {
        s["agents"] == serde_json::json!(["main"])
    });
    drop(up);

    let up = Up::start_config(
        &agents(&["main", "research"]),
        CHANNELS,
        "bindings: []\n",
        |_| {},
    );
    up.wait_for("two agents", |s| {
        s["agents"].as_array().is_some_and(|a| a.len() == 2)
    });
    for name in ["agents.yaml", "channels.yaml", "bindings.yaml"] {
        std::fs::remove_file(up.config.join(name)).unwrap();
    }
    let rejected = up.wait_for("the empty directory rejected", |s| !s["rejected"].is_null());
    let diagnostics = rejected["rejected"]["diagnostics"].to_string();
    assert!(
        diagnostics.contains("has none of agents.yaml"),
        "{diagnostics}"
    );
    assert!(
        diagnostics.contains("deepcli up --allow-empty"),
        "{diagnostics}"
    );
    assert_eq!(rejected["agents"], serde_json::json!(["main", "research"]));
    assert!(
        up.state.join("workspaces/research").is_dir(),
        "nothing was deleted"
    );
}

/// `plan` and `apply` name the flag that lets a guard through.
#[test]
fn a_blocked_plan_names_the_flag_for_plan_and_apply() {
    let hub = Hub::new();
    hub.write(
        "agents.yaml",
        "agents:\n  list:\n    - id: main\n    - id: a\n    - id: b\n      protect: true\n",
    );
    hub.write("bindings.yaml", "bindings: []\n");
    assert_eq!(hub.run(&["apply", "--auto-approve"]).code, 0);
    hub.write("agents.yaml", &agents(&["main"]));
    let plan = hub.run(&["plan"]);
    assert_eq!(plan.code, 1);
    let blocked = plan.stdout.split("Blocked:\n").nth(1).unwrap();
    assert_eq!(
        blocked,
        "  this plan deletes agent `b`, which is protected (`protect: true` when it was applied); if it is meant, pass --allow-destroy\n  this plan deletes 2 of 3 managed agents; an emptied or truncated agents.yaml, or a wrong --config, looks like this. Check the config; if it is meant, pass --allow-mass-delete\n"
    );
    let apply = hub.run(&["apply", "--auto-approve", "--allow-destroy"]);
    assert_eq!(apply.code, 1);
    assert!(
        apply.stderr.ends_with("error: the plan is blocked:\n  this plan deletes 2 of 3 managed agents; an emptied or truncated agents.yaml, or a wrong --config, looks like this. Check the config; if it is meant, pass --allow-mass-delete\n"),
        "{}",
        apply.stderr
    );
}

/// Regression: `status` told an operator of `up` to "pass --allow-mass-delete", which `up` did
/// not take. It now says to start `up` again with the flag, which lets through the plan of the
/// controller's first apply only: a later mass delete is blocked again.
#[test]
fn a_mass_delete_under_up_is_let_through_once_by_restarting_with_the_flag() {
    use crate::common::Up;
    let three = agents(&["main", "a", "b"]);
    let mut up = Up::start_config(&three, CHANNELS, "bindings: []\n", |_| {});
    up.wait_for("three agents", |s| {
        s["agents"].as_array().is_some_and(|a| a.len() == 3)
    });
    up.write_by_rename("agents.yaml", &agents(&["main"]));
    let blocked = up.wait_for("the mass delete blocked", |s| {
        s["blocked"].as_array().is_some_and(|b| !b.is_empty())
    });
    assert_eq!(
        blocked["blocked"],
        serde_json::json!([
            "this plan deletes 2 of 3 managed agents; an emptied or truncated agents.yaml, or a wrong --config, looks like this. Check the config; if it is meant, stop `deepcli up` and start it again with `deepcli up --allow-mass-delete`: the flag lets through only the plan its first apply makes, later plans are guarded again"
        ])
    );
    let human = Command::cargo_bin("deepcli")
        .unwrap()
        .args(["--state-dir", up.state.to_str().unwrap(), "status"])
        .output()
        .unwrap();
    assert_eq!(
        human.status.code(),
        Some(1),
        "a blocked plan degrades the hub"
    );
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains("blocked      this plan deletes 2 of 3"),
        "{human}"
    );
    assert!(!human.contains("pass --allow"), "{human}");

    assert!(up.terminate().success());
    up.restart(|c| {
        c.arg("--allow-mass-delete");
    });
    up.wait_for("the deletes applied", |s| {
        s["agents"] == serde_json::json!(["main"]) && s["blocked"] == serde_json::json!([])
    });
    assert!(!up.state.join("workspaces/a").exists(), "a went to trash");
    up.write_by_rename("agents.yaml", &three);
    up.wait_for("three agents again", |s| {
        s["agents"].as_array().is_some_and(|a| a.len() == 3) && s["serial"] == 3
    });
    up.write_by_rename("agents.yaml", &agents(&["main"]));
    up.wait_for("the second mass delete blocked", |s| {
        s["blocked"].as_array().is_some_and(|b| !b.is_empty())
    });
    assert!(
        up.state.join("workspaces/a").is_dir(),
        "nothing was deleted"
    );
}
