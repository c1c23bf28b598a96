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
