//! `deepcli state backup | restore | check` (issue 42): a backup taken while the controller
//! runs and answers is a sound state that restores into an empty directory with the
//! conversation in it; what is not a backup, a file in the way and a directory that holds a
//! state are refused with nothing written; `check` finds what is wrong.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Up, bin};

fn deepcli(state: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn agents() -> String {
    format!(
        "agents:\n  list:\n    - id: main\n      runtime: {{kind: acp, command: [\"{}\", demo-agent]}}\n",
        bin().display()
    )
}

#[test]
fn a_backup_of_a_running_hub_restores_into_an_empty_directory() {
    let up = Up::start(&agents(), "bindings: []\n");
    up.wait_for("main ready", |s| {
        Up::runtime(s, "main").is_some_and(|r| r["status"] == "ready")
    });
    // A trash entry's manifest, as a delete of an agent leaves it.
    let entry = up.state.join("trash").join("gone-20261201T000000Z");
    std::fs::create_dir_all(&entry).unwrap();
    let manifest = r#"{"format_version":1,"agent_id":"gone","created_at":"2026-12-01T00:00:00Z","serial":1,"items":[]}"#;
    std::fs::write(entry.join("manifest.json"), manifest).unwrap();

    let send = |text: &str| {
        let out = deepcli(&up.state, &["sessions", "send", "agent:main:main", text]);
        assert!(out.status.success(), "{}", text_of(&out));
    };
    send("SAY before the backup");
    // Turns go on while the backup reads.
    let state = up.state.clone();
    let busy = std::thread::spawn(move || {
        for n in 0..5 {
            let out = deepcli(
                &state,
                &[
                    "sessions",
                    "send",
                    "agent:main:main",
                    &format!("SAY during {n}"),
                ],
            );
            assert!(out.status.success(), "{}", text_of(&out));
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("hub.backup");
    let out = deepcli(
        &up.state,
        &["state", "backup", file.to_str().unwrap(), "--json"],
    );
    assert!(out.status.success(), "{}", text_of(&out));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        info["trashEntries"],
        serde_json::json!(["gone-20261201T000000Z"])
    );
    busy.join().unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "a backup holds the hub's conversations: owner only"
    );

    // Into an empty directory: the same lineage, the conversation, the trash's manifest.
    let restored = tmp.path().join("restored");
    let out = deepcli(
        &restored,
        &["state", "restore", file.to_str().unwrap(), "--json"],
    );
    assert!(out.status.success(), "{}", text_of(&out));
    let back: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(back["lineage"], info["lineage"]);
    assert_eq!(back["serial"], info["serial"]);
    let history = deepcli(&restored, &["sessions", "history", "agent:main:main"]);
    assert!(
        text(&history.stdout).contains("[agent] agent main: before the backup"),
        "{}",
        text_of(&history)
    );
    assert_eq!(
        std::fs::read_to_string(restored.join("trash/gone-20261201T000000Z/manifest.json"))
            .unwrap(),
        manifest
    );
    let check = deepcli(&restored, &["state", "check"]);
    assert_eq!(check.status.code(), Some(0), "{}", text_of(&check));
    assert!(
        text(&check.stdout).contains("is sound"),
        "{}",
        text_of(&check)
    );

    // Refused, nothing written: the file in the way, a directory that holds a state, a file
    // that is no backup (the live database itself, garbage).
    let out = deepcli(&up.state, &["state", "backup", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("a backup never overwrites a file"),
        "{}",
        text_of(&out)
    );
    let out = deepcli(&up.state, &["state", "restore", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("already holds a state"),
        "{}",
        text_of(&out)
    );
    let garbage = tmp.path().join("garbage");
    std::fs::write(&garbage, b"not a database at all").unwrap();
    for not_a_backup in [up.state.join("state.db"), garbage] {
        let target = tmp.path().join("never");
        let out = deepcli(
            &target,
            &["state", "restore", not_a_backup.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(1), "{}", text_of(&out));
        assert!(
            text(&out.stderr).contains("is not a usable backup"),
            "{}",
            text_of(&out)
        );
        assert!(!target.join("state.db").exists());
    }
}

fn text_of(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// A state at `state` with one applied config (agent `main`), its config under `tmp/config`.
fn applied(tmp: &Path, state: &Path) {
    let config = tmp.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(state)
        .args(["apply", "--auto-approve"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text_of(&out));
}

#[test]
fn check_finds_orphan_rows_and_unreadable_trash_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    applied(tmp.path(), &state);
    let check = deepcli(&state, &["state", "check"]);
    assert_eq!(check.status.code(), Some(0), "{}", text_of(&check));

    let db = rusqlite::Connection::open(state.join("state.db")).unwrap();
    db.execute(
        "INSERT INTO transcript (session_key, provenance, text, at) VALUES ('agent:gone:main', 'inbound', 'x', '2026-12-01T00:00:00Z')",
        [],
    )
    .unwrap();
    drop(db);
    let entry = state.join("trash").join("broken-20261201T000000Z");
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::write(entry.join("manifest.json"), "{not json").unwrap();
    let check = deepcli(&state, &["state", "check"]);
    assert_eq!(check.status.code(), Some(1), "{}", text_of(&check));
    let found = text(&check.stdout);
    assert!(
        found.contains("orphan: 1 transcript rows name a session"),
        "{found}"
    );
    assert!(
        found.contains("trash: trash entry `broken-20261201T000000Z`"),
        "{found}"
    );

    let nothing = deepcli(&tmp.path().join("nothing"), &["state", "check"]);
    assert_eq!(nothing.status.code(), Some(1), "{}", text_of(&nothing));
}

/// examples/systemd/deepcli-backup.service's commands, as systemd runs them (`%%` is `%`), with
/// its paths moved into a temp directory: a dated backup that restores, and old ones deleted.
#[test]
fn the_systemd_backup_service_runs_as_written() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/systemd/deepcli-backup.service"),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("var/lib/deepcli");
    let backups = tmp.path().join("var/backups/deepcli");
    applied(tmp.path(), &state);
    // An old backup the service's cleanup removes.
    std::fs::create_dir_all(&backups).unwrap();
    let old = backups.join("state-20200101T000000Z.db");
    std::fs::write(&old, b"old").unwrap();
    let month_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(30 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(month_ago)
        .unwrap();

    let bin_dir = bin().parent().unwrap().to_path_buf();
    for key in ["ExecStartPre=", "ExecStart=", "ExecStartPost="] {
        let line = unit
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the unit"));
        let line = line
            .replace("%%", "%")
            .replace("/usr/local/bin/deepcli", bin().to_str().unwrap())
            .replace("/var/", &format!("{}/var/", tmp.path().display()))
            .replace("/usr/bin/", "");
        let out = Command::new("sh")
            .arg("-c")
            .arg(&line)
            .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{key}{line}: {}", text_of(&out));
    }
    let made: Vec<_> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}: the old one deleted, one new");
    let name = made[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("state-")
            && name.ends_with("Z.db")
            && name.len() == "state-20261205T000000Z.db".len(),
        "{name}"
    );
    let restored = tmp.path().join("restored");
    let out = deepcli(&restored, &["state", "restore", made[0].to_str().unwrap()]);
    assert!(out.status.success(), "{}", text_of(&out));
}

/// examples/systemd/deepcli.service as systemd runs it: ExecStartPre's check passes on a hub
/// that can start and fails while the address is taken; ExecStart runs the controller, and
/// `systemctl stop` (KillSignal SIGTERM to deepcli, KillMode mixed) ends it within
/// TimeoutStopSec with exit 0, its runtime stopped by deepcli itself.
#[test]
fn the_systemd_service_checks_starts_and_stops_as_written() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/systemd/deepcli.service"),
    )
    .unwrap();
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the unit"))
            .to_string()
    };
    assert_eq!(value("KillSignal="), "SIGTERM");
    assert_eq!(value("KillMode="), "mixed");
    let grace: u64 = value("TimeoutStopSec=").parse().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let hub = tmp.path().join("etc/deepcli/hub");
    std::fs::create_dir_all(&hub).unwrap();
    std::fs::write(hub.join("agents.yaml"), agents()).unwrap();
    let addr = crate::common::free_addr().to_string();
    let line = |key: &str| {
        value(key)
            .replace("/usr/local/bin/deepcli", bin().to_str().unwrap())
            .replace("/etc/", &format!("{}/etc/", tmp.path().display()))
            .replace("/var/", &format!("{}/var/", tmp.path().display()))
            + &format!(" --listen {addr}")
    };
    let sh = |script: &str| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .env_remove("DEEPCLI_OPERATOR_TOKEN");
        cmd
    };
    let pre = sh(&line("ExecStartPre=")).output().unwrap();
    assert!(pre.status.success(), "{}", text_of(&pre));
    assert!(
        text(&pre.stdout).starts_with("ok: config "),
        "{}",
        text_of(&pre)
    );

    let mut child = sh(&format!("exec {}", line("ExecStart=")))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let state = tmp.path().join("var/lib/deepcli");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pid = loop {
        let out = deepcli(&state, &["status", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if let Some(pid) = doc["runtimes"][0]["pid"]
            .as_u64()
            .filter(|_| doc["runtimes"][0]["status"] == "ready")
        {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not ready: {}",
            text_of(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // A second start's check fails while this one holds the address.
    let pre = sh(&line("ExecStartPre=")).output().unwrap();
    assert_eq!(pre.status.code(), Some(1), "{}", text_of(&pre));
    assert!(
        text(&pre.stderr).contains(&format!("cannot listen on {addr}")),
        "{}",
        text_of(&pre)
    );

    // `systemctl stop`: SIGTERM to the main process.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(grace);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after TimeoutStopSec"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "a graceful stop exits 0");
    assert!(
        !crate::common::alive(pid),
        "the runtime {pid} outlived its controller"
    );
}
