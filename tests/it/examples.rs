//! The walk-throughs of `examples/*/README.md`, run exactly as written: each `console` block's
//! `$ ` lines are run by `sh` in a copy of the repository's `examples/`, and what they print
//! must be what the README shows below them.
//!
//! In the expected output, `…` stands for any text within a line, and a line that is only `…`
//! for any number of lines. `<name>` (a lowercase name, spaces allowed) stands for an id: the
//! first time it is met in an output it is read there, and where it comes again (in an output
//! or a command) it must be, or is replaced by, that same id. `$ export K=V …` sets the
//! variables for the commands after it; a command that ends in ` up` starts the controller in
//! the background, as the README's "in one terminal" does, and the walk-through goes on once it
//! is healthy, its config applied and its runtimes ready; one that ends in ` &` runs in the
//! background too, as in a terminal of its own, and the walk-through goes on once it printed
//! what the README shows. A command that only reads (`status`, `sessions history`, `runs list|show`,
//! `approvals list`, `audit`) is run again, for a while, until its output matches: what it shows
//! may still be on its way, as it would be for a person typing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `$ ` line of a walk-through and the output shown under it.
#[derive(Debug)]
struct Step {
    /// Where it is: `README.md:LINE`.
    line: usize,
    command: String,
    expected: Vec<String>,
}

fn steps(markdown: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut inside = false;
    for (n, line) in markdown.lines().enumerate() {
        if !inside {
            inside = line.trim() == "```console";
            continue;
        }
        if line.trim() == "```" {
            inside = false;
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                line: n + 1,
                command: command.to_string(),
                expected: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.expected.push(line.to_string());
        }
    }
    steps
}

type Ids = HashMap<String, String>;

/// The placeholders of a line: its parts, literal text and `<name>`s.
enum Part<'a> {
    Text(&'a str),
    Any,
    Id(&'a str),
}

fn parts(line: &str) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let next_any = rest.find('…');
        let next_id = rest.find('<').filter(|&at| {
            rest[at + 1..].find('>').is_some_and(|end| {
                let name = &rest[at + 1..at + 1 + end];
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == ' ')
            })
        });
        match (next_any, next_id) {
            (Some(a), i) if i.is_none_or(|i| a < i) => {
                out.push(Part::Text(&rest[..a]));
                out.push(Part::Any);
                rest = &rest[a + '…'.len_utf8()..];
            }
            (_, Some(i)) => {
                let end = i + 1 + rest[i + 1..].find('>').unwrap_or(0);
                out.push(Part::Text(&rest[..i]));
                out.push(Part::Id(&rest[i + 1..end]));
                rest = &rest[end + 1..];
            }
            _ => {
                out.push(Part::Text(rest));
                rest = "";
            }
        }
    }
    out
}

/// Whether `actual` is `parts`, binding the ids it meets; `None` when it is not.
fn line_matches(parts: &[Part], actual: &str, ids: &Ids) -> Option<Ids> {
    match parts.split_first() {
        None => actual.is_empty().then(|| ids.clone()),
        Some((Part::Text(text), rest)) => line_matches(rest, actual.strip_prefix(text)?, ids),
        Some((Part::Any, rest)) => (0..=actual.len())
            .filter(|&at| actual.is_char_boundary(at))
            .find_map(|at| line_matches(rest, &actual[at..], ids)),
        Some((Part::Id(name), rest)) => match ids.get(*name) {
            Some(id) => line_matches(rest, actual.strip_prefix(id.as_str())?, ids),
            None => {
                let len = actual
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "-_:.".contains(c)))
                    .unwrap_or(actual.len());
                (1..=len).rev().find_map(|at| {
                    let mut bound = ids.clone();
                    bound.insert(name.to_string(), actual[..at].to_string());
                    line_matches(rest, &actual[at..], &bound)
                })
            }
        },
    }
}

fn lines_match(expected: &[String], actual: &[&str], ids: &Ids) -> Option<Ids> {
    match expected.split_first() {
        None => actual.is_empty().then(|| ids.clone()),
        Some((any, rest)) if any == "…" => {
            (0..=actual.len()).find_map(|skip| lines_match(rest, &actual[skip..], ids))
        }
        Some((line, rest)) => {
            let (first, after) = actual.split_first()?;
            let ids = line_matches(&parts(line), first.trim_end(), ids)?;
            lines_match(rest, after, &ids)
        }
    }
}

/// A command with its `<name>`s replaced by their ids.
fn filled(command: &str, ids: &Ids) -> String {
    let mut out = command.to_string();
    for (name, id) in ids {
        out = out.replace(&format!("<{name}>"), id);
    }
    assert!(
        !parts(&out).iter().any(|p| matches!(p, Part::Id(_))),
        "`{command}` names an id no output showed before it"
    );
    out
}

const READERS: [&str; 9] = [
    "deepcli status",
    "deepcli tasks list",
    "deepcli tasks show",
    "deepcli sessions history",
    "deepcli runs list",
    "deepcli runs show",
    "deepcli approvals list",
    "deepcli audit",
    "deepcli pairing list",
];

/// The controller a walk-through started, stopped as `Ctrl-C` would.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The walk-throughs' controllers listen where the READMEs say, 127.0.0.1:7430: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the walk-through of `examples/<name>/README.md`.
fn walk(name: &str) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = repo.join("examples").join(name).join("README.md");
    let markdown = std::fs::read_to_string(&readme).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo.join("examples"), &tmp.path().join("examples"));
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_deepcli"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), tmp.path().display().to_string()),
        ("NO_COLOR".into(), "1".into()),
    ];
    let mut ids = Ids::new();
    let mut controller = None;
    let mut background = Vec::new();
    let steps = steps(&markdown);
    assert!(
        !steps.is_empty(),
        "{} has no console block",
        readme.display()
    );
    for step in steps {
        let at = format!("examples/{name}/README.md:{}", step.line);
        let command = filled(&step.command, &ids);
        let sh = |script: &str| {
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(script)
                .current_dir(tmp.path())
                .env_clear()
                .envs(env.iter().cloned());
            sh
        };
        if let Some(vars) = command.strip_prefix("export ") {
            for pair in vars.split_whitespace() {
                let (k, v) = pair.split_once('=').expect("export K=V");
                env.push((k.to_string(), v.to_string()));
            }
            continue;
        }
        if let Some(command) = command.strip_suffix(" &") {
            let log = tmp.path().join(format!("background-{}.log", step.line));
            let child = sh(&format!("exec {command}"))
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            background.push(Controller(child));
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let actual: Vec<&str> = text.lines().collect();
                if let Some(bound) = lines_match(&step.expected, &actual, &ids) {
                    ids = bound;
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{at}: `{command}` printed\n{text}\nwhere the README shows\n{}",
                    step.expected.join("\n")
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        if command.ends_with(" up") {
            // The walk-through before may still be letting go of the address.
            let deadline = Instant::now() + Duration::from_secs(30);
            while std::net::TcpStream::connect("127.0.0.1:7430").is_ok() {
                assert!(
                    Instant::now() < deadline,
                    "{at}: something else listens on 127.0.0.1:7430, where the walk-through's controller listens"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            let log = tmp.path().join("up.log");
            let child = sh(&format!("exec {command}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            controller = Some(Controller(child));
            let state = command
                .split_once("--state-dir ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .expect("the up command names its --state-dir");
            // Healthy, the config applied, every runtime ready: what a person sees before
            // typing the next command. A config with runtimes shows them once the supervisor
            // has them (`runtimes none` a moment before, which is not ready).
            let agents =
                std::fs::read_to_string(tmp.path().join("examples").join(name).join("agents.yaml"))
                    .unwrap_or_default();
            let runs_runtimes = agents.contains("runtime:");
            let ready = |o: std::process::Output| {
                let status = String::from_utf8_lossy(&o.stdout).into_owned();
                status.starts_with("health       healthy")
                    && status
                        .lines()
                        .any(|l| l.starts_with("state ") && !l.contains("serial 0,"))
                    && status
                        .lines()
                        .filter(|l| l.starts_with("runtime "))
                        .all(|l| l.contains(" ready "))
                    && !(runs_runtimes && status.contains("runtimes     none"))
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while !sh(&format!("deepcli --state-dir {state} status"))
                .output()
                .is_ok_and(ready)
            {
                assert!(
                    Instant::now() < deadline,
                    "{at}: the controller is not ready after 30 s; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        let reads = READERS.iter().any(|r| command.starts_with(r));
        let deadline = Instant::now() + Duration::from_secs(if reads { 20 } else { 0 });
        loop {
            let out = sh(&format!("{command} 2>&1")).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let actual: Vec<&str> = text.lines().collect();
            if let Some(bound) = lines_match(&step.expected, &actual, &ids) {
                ids = bound;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{at}: `{command}` printed\n{text}\nwhere the README shows\n{}\n(the controller's log:\n{})",
                step.expected.join("\n"),
                std::fs::read_to_string(tmp.path().join("up.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drop(controller);
    drop(background);
}

#[test]
fn the_hub_demo_walk_through_runs_as_written() {
    walk("hub-demo");
}

#[test]
fn the_a2a_demo_walk_through_runs_as_written() {
    walk("a2a-demo");
}

#[test]
fn the_chat_demo_walk_through_runs_as_written() {
    walk("chat-demo");
}

#[test]
fn expected_output_reads_ids_and_any_text() {
    let ids = Ids::new();
    let bound = lines_match(
        &["run <a run>: …".into(), "…".into(), "done <a run>".into()],
        &["run r-1: running", "x", "y", "done r-1"],
        &ids,
    )
    .unwrap();
    assert_eq!(bound["a run"], "r-1");
    assert!(lines_match(&["done <a run>".into()], &["done r-2"], &bound).is_none());
    assert!(lines_match(&["a".into()], &["a", "b"], &ids).is_none());
    assert_eq!(
        filled("deepcli runs show <a run>", &bound),
        "deepcli runs show r-1"
    );
}
