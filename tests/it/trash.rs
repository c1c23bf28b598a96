//! The trash on real directories: the guard, moves by rename and by copy, crash recovery,
//! listing and restoring.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use deepcli::trash::{
    self, Guard, Kept, Manifest, ManifestFile, ManifestItem, PathRefusal, RefusedPath, Transfer,
    TrashError, TrashItem,
};
use tempfile::TempDir;

/// A state directory, a config directory and a home inside one temp dir, plus one agent's
/// directories with some content.
struct World {
    _tmp: TempDir,
    root: PathBuf,
    config: PathBuf,
    state: PathBuf,
    home: PathBuf,
    trash: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        // Canonical, so that expected paths compare equal to what the guard resolves.
        let root = fs::canonicalize(tmp.path()).unwrap();
        let config = root.join("config");
        let state = root.join("state");
        let home = root.join("home");
        for dir in [&config, &state, &home] {
            fs::create_dir_all(dir).unwrap();
        }
        let trash = state.join("trash");
        World {
            _tmp: tmp,
            root,
            config,
            state,
            home,
            trash,
        }
    }

    fn guard(&self) -> Guard {
        Guard::new(&self.config, &self.state, Some(&self.home))
    }

    /// workspace, agentDir and sessions for `id`, under the state directory as deepcli lays
    /// them out by default.
    fn agent(&self, id: &str) -> Vec<TrashItem> {
        let workspace = self.state.join("workspaces").join(id);
        let agent_dir = self.state.join("agents").join(id).join("agent");
        let sessions = self.state.join("agents").join(id).join("sessions");
        write(&workspace.join("SOUL.md"), "be kind\n");
        write(&workspace.join("memory/2026-11-30.md"), "remembered\n");
        write(&agent_dir.join("auth.json"), "{}\n");
        write(&sessions.join("s1.jsonl"), "{\"turn\":1}\n");
        items(&[
            ("workspace", &workspace),
            ("agentDir", &agent_dir),
            ("sessions", &sessions),
        ])
    }
}

fn items(list: &[(&str, &Path)]) -> Vec<TrashItem> {
    list.iter()
        .map(|(label, path)| TrashItem::whole(*label, *path))
        .collect()
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

fn at(text: &str) -> jiff::Timestamp {
    text.parse().unwrap()
}

fn trash_agent(w: &World, id: &str, items: &[TrashItem], transfer: Transfer) -> Manifest {
    let entry = trash::entry_name(id, at("2026-11-30T05:36:00Z"));
    trash::move_to_trash_with(&w.trash, &entry, id, 7, items, &[], &w.guard(), transfer).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Guard

#[test]
fn the_guard_refuses_root_homes_and_deepcli_directories() {
    let w = World::new();
    let guard = w.guard();
    let refused = |path: &Path| guard.check(path).err();

    for path in [
        PathBuf::from("/"),
        PathBuf::from("/home"),
        PathBuf::from("/home/someone"),
        PathBuf::from("/root"),
        w.home.clone(),
        w.home.join("ws/.."),
        w.config.clone(),
        w.state.clone(),
        w.trash.clone(),
        w.trash.join("x-20261130T053600Z"),
        // Ancestors of the state directory.
        w.root.clone(),
        w.root.parent().unwrap().to_path_buf(),
        // `..` cannot climb above the root.
        PathBuf::from("/../.."),
    ] {
        assert!(refused(&path).is_some(), "{} was allowed", path.display());
    }
    for path in [
        w.state.join("workspaces/a"),
        w.home.join("agents/a"),
        w.config.join("inside"),
        w.root.join("elsewhere"),
    ] {
        assert!(
            guard.check(&path).is_ok(),
            "{} was refused: {:?}",
            path.display(),
            guard.check(&path)
        );
    }
}

/// Regression (issue 15, item 3): only `/` and homes were refused, so `/etc` or `/usr/share/x`
/// could be moved to trash whole.
#[test]
fn the_guard_refuses_system_trees() {
    let w = World::new();
    let guard = w.guard();
    for path in [
        "/etc",
        "/etc/deepcli/agents/x",
        "/usr",
        "/usr/local/share/x",
        "/var",
        "/var/lib",
        "/var/tmp",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/lib/x86_64-linux-gnu",
        "/boot",
        "/boot/efi",
        "/opt",
        "/srv",
        "/proc",
        "/proc/self",
        "/sys/kernel",
        "/dev",
        "/dev/shm/x",
        "/run",
        "/run/user/1000/x",
        "/tmp",
        "/tmp/../etc",
    ] {
        let err = guard
            .check(Path::new(path))
            .expect_err(&format!("{path} was allowed"));
        assert!(err.to_string().contains("system"), "{path}: {err}");
    }
    for path in [
        "/srv/agents/x",
        "/opt/hub/agents/x",
        "/var/lib/deepcli/agents/x",
        "/tmp/agents/x",
        "/library/x",
    ] {
        assert!(
            guard.check(Path::new(path)).is_ok(),
            "{path} was refused: {:?}",
            guard.check(Path::new(path))
        );
    }
}

#[test]
fn errors_stay_small_enough_to_return() {
    // clippy's result_large_err limit; every caller's `Result` carries this type.
    assert!(std::mem::size_of::<TrashError>() < 128);
}

#[test]
fn the_guard_refuses_relative_paths() {
    let w = World::new();
    let err = w.guard().check(Path::new("workspaces/a")).unwrap_err();
    assert!(
        matches!(
            &err,
            TrashError::Refused(RefusedPath {
                reason: PathRefusal::Relative,
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn the_guard_sees_through_symlinks() {
    let w = World::new();
    let to_home = w.root.join("link-to-home");
    symlink(&w.home, &to_home).unwrap();
    let into_home = w.root.join("links/deep/link-into-home");
    fs::create_dir_all(w.home.join("projects/x")).unwrap();
    fs::create_dir_all(into_home.parent().unwrap()).unwrap();
    symlink(w.home.join("projects/x"), &into_home).unwrap();

    let err = w.guard().check(&to_home).unwrap_err();
    let TrashError::Refused(refused) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(refused.resolved.as_deref(), Some(w.home.as_path()));
    assert!(err.to_string().contains("resolves to"), "{err}");
    // The kernel resolves `link/../..` through the link, to the home directory, though
    // lexically it is the harmless `links/`.
    assert!(w.guard().check(&w.root.join("links")).is_ok());
    assert!(w.guard().check(&into_home.join("../..")).is_err());
    assert!(w.guard().check(&into_home).is_ok());
}

#[test]
fn a_state_directory_reached_through_a_symlink_is_still_protected() {
    let w = World::new();
    let alias = w.root.join("state-alias");
    symlink(&w.state, &alias).unwrap();
    let guard = Guard::new(&w.config, &alias, Some(&w.home));
    assert!(guard.check(&w.state).is_err());
    assert!(guard.check(&w.root).is_err());
}

// ---------------------------------------------------------------------------------------------
// Refusals move nothing

#[test]
fn a_workspace_at_home_or_root_moves_nothing() {
    let w = World::new();
    let mut agent = w.agent("a");
    for bad in [w.home.clone(), PathBuf::from("/")] {
        agent[0].path = bad.clone();
        let err = trash::move_to_trash(
            &w.trash,
            "a-20261130T053600Z",
            "a",
            1,
            &agent,
            &[],
            &w.guard(),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, TrashError::ItemRefused { .. }), "{err:?}");
        assert!(
            message.contains(&format!("`{}`", bad.display())),
            "{message}"
        );
        assert!(message.contains("agents.yaml"), "{message}");
        assert!(message.contains("nothing was moved"), "{message}");
        // Not even the entry directory was made, and the other items stayed.
        assert!(!w.trash.exists());
        assert!(agent[1].path.join("auth.json").exists());
        assert!(agent[2].path.join("s1.jsonl").exists());
    }
    assert!(w.home.exists());
}

#[test]
fn nested_items_are_refused() {
    let w = World::new();
    let agent = w.agent("a");
    let nested = items(&[
        ("agentDir", &agent[1].path),
        ("sessions", &agent[1].path.join("sessions")),
    ]);
    let err = trash::move_to_trash(&w.trash, "a-1", "a", 1, &nested, &[], &w.guard()).unwrap_err();
    assert!(matches!(err, TrashError::Overlap { .. }), "{err:?}");
    assert!(!w.trash.exists());
}

#[test]
fn bad_entry_names_and_labels_are_refused() {
    let w = World::new();
    let agent = w.agent("a");
    for name in ["", "../x", ".hidden", "a/b"] {
        let err =
            trash::move_to_trash(&w.trash, name, "a", 1, &agent, &[], &w.guard()).unwrap_err();
        assert!(matches!(err, TrashError::BadEntryName { .. }), "{err:?}");
    }
    let bad = items(&[("../escape", &agent[0].path)]);
    let err = trash::move_to_trash(&w.trash, "a-1", "a", 1, &bad, &[], &w.guard()).unwrap_err();
    assert!(matches!(err, TrashError::BadLabel { .. }), "{err:?}");
    assert!(agent[0].path.join("SOUL.md").exists());
}

// ---------------------------------------------------------------------------------------------
// Moving

#[test]
fn entry_names_carry_the_utc_stamp_and_stay_unique() {
    let w = World::new();
    let when = at("2026-11-30T05:36:00.25Z");
    assert_eq!(
        trash::entry_name("research", when),
        "research-20261130T053600Z"
    );
    assert_eq!(
        trash::unique_entry_name(&w.trash, "research", when),
        "research-20261130T053600Z"
    );
    fs::create_dir_all(w.trash.join("research-20261130T053600Z")).unwrap();
    assert_eq!(
        trash::unique_entry_name(&w.trash, "research", when),
        "research-20261130T053600Z-2"
    );
    fs::create_dir_all(w.trash.join("research-20261130T053600Z-2")).unwrap();
    assert_eq!(
        trash::unique_entry_name(&w.trash, "research", when),
        "research-20261130T053600Z-3"
    );
}

#[test]
fn moving_an_agent_records_everything_in_the_manifest() {
    let w = World::new();
    let agent = w.agent("a");
    let kept = [Kept {
        label: "workspace".into(),
        path: w.state.join("shared"),
        reason: "workspace shared with agent x".into(),
    }];
    let manifest = trash::move_to_trash(
        &w.trash,
        "a-20261130T053600Z",
        "a",
        42,
        &agent,
        &kept,
        &w.guard(),
    )
    .unwrap();

    let dir = w.trash.join("a-20261130T053600Z");
    assert_eq!(manifest, trash::read_manifest(&dir).unwrap());
    assert_eq!(manifest.format_version, 1);
    assert_eq!(manifest.agent_id, "a");
    assert_eq!(manifest.serial, 42);
    assert!(manifest.created_at.parse::<jiff::Timestamp>().is_ok());
    assert!(
        manifest.created_at.ends_with('Z'),
        "{}",
        manifest.created_at
    );
    assert!(manifest.is_complete());
    assert_eq!(manifest.kept.len(), 1);
    assert_eq!(manifest.kept[0].reason, "workspace shared with agent x");
    for (item, given) in manifest.items.iter().zip(&agent) {
        assert_eq!(item.label, given.label);
        assert_eq!(item.original, given.path);
        assert_eq!(item.stored, given.label);
        assert!(item.moved && item.existed, "{item:?}");
        assert!(!given.path.exists());
    }
    assert_eq!(read(&dir.join("workspace/SOUL.md")), "be kind\n");
    assert_eq!(read(&dir.join("sessions/s1.jsonl")), "{\"turn\":1}\n");
    // The atomic write leaves no temporary file behind.
    let names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
}

#[test]
fn a_missing_original_is_recorded_and_skipped() {
    let w = World::new();
    let mut agent = w.agent("a");
    agent[2].path = w.state.join("agents/a/never-created");
    let manifest = trash_agent(&w, "a", &agent, Transfer::Auto);
    let sessions = &manifest.items[2];
    assert!(!sessions.existed && !sessions.moved, "{sessions:?}");
    assert!(manifest.items[0].moved && manifest.items[1].moved);
    assert!(manifest.is_complete());
}

#[test]
fn the_copy_path_keeps_permissions_and_symlinks_without_following_them() {
    let w = World::new();
    let outside = w.root.join("outside");
    write(&outside.join("precious.txt"), "not ours\n");

    let from = w.state.join("workspaces/a");
    write(&from.join("script.sh"), "#!/bin/sh\n");
    fs::set_permissions(from.join("script.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    write(&from.join("notes/private.md"), "secret\n");
    fs::set_permissions(
        from.join("notes/private.md"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    fs::create_dir_all(from.join("empty")).unwrap();
    write(&from.join("locked/inside.txt"), "x\n");
    fs::set_permissions(from.join("locked"), fs::Permissions::from_mode(0o555)).unwrap();
    symlink(&outside, from.join("to-outside")).unwrap();
    symlink("notes/private.md", from.join("relative-link")).unwrap();
    symlink("does-not-exist", from.join("dangling")).unwrap();

    let to = w.root.join("moved");
    trash::move_path(&from, &to, Transfer::ForceCopy).unwrap();

    assert!(!from.exists());
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&to.join("script.sh")), 0o750);
    assert_eq!(mode(&to.join("notes/private.md")), 0o600);
    assert_eq!(mode(&to.join("locked")), 0o555);
    assert_eq!(read(&to.join("locked/inside.txt")), "x\n");
    assert!(to.join("empty").is_dir());
    assert_eq!(fs::read_link(to.join("to-outside")).unwrap(), outside);
    assert_eq!(
        fs::read_link(to.join("relative-link")).unwrap(),
        PathBuf::from("notes/private.md")
    );
    assert_eq!(
        fs::read_link(to.join("dangling")).unwrap(),
        PathBuf::from("does-not-exist")
    );
    // The link was copied as a link: the directory it points at was neither copied nor
    // removed.
    assert!(
        fs::symlink_metadata(to.join("to-outside"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(&outside.join("precious.txt")), "not ours\n");
    // No staging tree is left behind.
    assert!(!w.root.join(".moved.deepcli-partial").exists());
}

#[test]
fn the_copy_path_moves_a_single_file_and_a_symlink() {
    let w = World::new();
    write(&w.root.join("file"), "one\n");
    trash::move_path(
        &w.root.join("file"),
        &w.root.join("file2"),
        Transfer::ForceCopy,
    )
    .unwrap();
    assert_eq!(read(&w.root.join("file2")), "one\n");
    assert!(!w.root.join("file").exists());

    symlink(&w.home, w.root.join("link")).unwrap();
    trash::move_path(
        &w.root.join("link"),
        &w.root.join("link2"),
        Transfer::ForceCopy,
    )
    .unwrap();
    assert_eq!(fs::read_link(w.root.join("link2")).unwrap(), w.home);
    assert!(w.home.is_dir());
}

#[test]
fn a_whole_agent_moves_by_copy_and_comes_back() {
    let w = World::new();
    let agent = w.agent("a");
    let manifest = trash_agent(&w, "a", &agent, Transfer::ForceCopy);
    assert!(manifest.is_complete());
    for item in &agent {
        assert!(!item.path.exists());
    }
    let entry = trash::entry_name("a", at("2026-11-30T05:36:00Z"));
    // The agents/a directory goes too, so restoring must recreate parents.
    fs::remove_dir_all(w.state.join("agents")).unwrap();
    trash::restore_with(&w.trash, &entry, &w.guard(), Transfer::ForceCopy).unwrap();
    assert_eq!(
        read(&agent[0].path.join("memory/2026-11-30.md")),
        "remembered\n"
    );
    assert_eq!(read(&agent[2].path.join("s1.jsonl")), "{\"turn\":1}\n");
    assert!(!w.trash.join(&entry).exists());
}

#[test]
fn a_special_file_stops_the_copy_and_keeps_the_original() {
    let w = World::new();
    let from = w.state.join("workspaces/a");
    write(&from.join("keep.md"), "k\n");
    nix::unistd::mkfifo(&from.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let to = w.root.join("moved");
    let err = trash::move_path(&from, &to, Transfer::ForceCopy).unwrap_err();
    assert!(matches!(err, TrashError::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("pipe"), "{err}");
    assert_eq!(read(&from.join("keep.md")), "k\n");
    assert!(!to.exists());
    assert!(!w.root.join(".moved.deepcli-partial").exists());
}

#[test]
fn verify_copy_names_the_first_difference() {
    let w = World::new();
    let a = w.root.join("a");
    let b = w.root.join("b");
    write(&a.join("x/y.txt"), "same size 1\n");
    write(&b.join("x/y.txt"), "same size 2\n");
    let err = trash::verify_copy(&a, &b).unwrap_err();
    assert!(err.to_string().contains("x/y.txt"), "{err}");
    assert!(err.to_string().contains("content"), "{err}");

    write(&b.join("x/y.txt"), "same size 1\n");
    trash::verify_copy(&a, &b).unwrap();
    write(&b.join("extra"), "");
    let err = trash::verify_copy(&a, &b).unwrap_err();
    assert!(err.to_string().contains("extra"), "{err}");
}

#[test]
fn move_path_will_not_overwrite() {
    let w = World::new();
    write(&w.root.join("a"), "a\n");
    write(&w.root.join("b"), "b\n");
    for transfer in [Transfer::Auto, Transfer::ForceCopy] {
        let err = trash::move_path(&w.root.join("a"), &w.root.join("b"), transfer).unwrap_err();
        assert!(
            matches!(err, TrashError::DestinationExists { .. }),
            "{err:?}"
        );
    }
    assert_eq!(read(&w.root.join("b")), "b\n");
}

/// A directory on a filesystem other than the temp dir's, gone with the value.
enum OtherFilesystem {
    /// A temp dir in `/dev/shm`, where that is its own filesystem.
    Shm(TempDir),
    /// A tmpfs this test mounted (as root, where mounting is permitted).
    Mounted(TempDir),
}

impl OtherFilesystem {
    fn path(&self) -> &Path {
        match self {
            OtherFilesystem::Shm(dir) | OtherFilesystem::Mounted(dir) => dir.path(),
        }
    }

    /// Every second filesystem this machine offers: `/dev/shm` and a tmpfs of our own.
    fn all(near: &Path) -> Vec<OtherFilesystem> {
        use std::os::unix::fs::MetadataExt;
        let here = fs::metadata(near).unwrap().dev();
        let mut found = Vec::new();
        if fs::metadata("/dev/shm").is_ok_and(|m| m.dev() != here)
            && let Ok(dir) = tempfile::tempdir_in("/dev/shm")
        {
            found.push(OtherFilesystem::Shm(dir));
        }
        let point = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", "deepcli-test"])
            .arg(point.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            found.push(OtherFilesystem::Mounted(point));
        }
        found
    }
}

impl Drop for OtherFilesystem {
    fn drop(&mut self) {
        if let OtherFilesystem::Mounted(point) = self {
            let _ = std::process::Command::new("umount")
                .arg(point.path())
                .status();
        }
    }
}

/// `rename` really fails with EXDEV, and the move copies, verifies and removes: from
/// `/dev/shm` when it is another filesystem, and from a tmpfs the test mounts when it may
/// (both, here). Without either it fails rather than pass having tested nothing;
/// `DEEPCLI_TEST_SKIP_CROSS_FS=1` skips it knowingly, and says so.
#[test]
fn a_real_cross_filesystem_move_copies() {
    use std::os::unix::fs::MetadataExt;
    let w = World::new();
    let others = OtherFilesystem::all(&w.root);
    if others.is_empty() {
        let why = "no second filesystem: /dev/shm is on the temp dir's filesystem (or missing) \
                   and `mount -t tmpfs` is not permitted";
        if std::env::var_os("DEEPCLI_TEST_SKIP_CROSS_FS").is_some() {
            eprintln!("SKIPPED a_real_cross_filesystem_move_copies: {why}");
            return;
        }
        panic!(
            "{why}; set TMPDIR to another filesystem than /dev/shm, run as root, or skip this \
             test knowingly with DEEPCLI_TEST_SKIP_CROSS_FS=1"
        );
    }
    for (n, other) in others.iter().enumerate() {
        let from = other.path().join("ws");
        write(&from.join("a/b.txt"), "across\n");
        let to = w.root.join(format!("ws-{n}"));
        assert_ne!(
            fs::metadata(&from).unwrap().dev(),
            fs::metadata(&w.root).unwrap().dev(),
            "not another filesystem: {}",
            from.display()
        );
        trash::move_path(&from, &to, Transfer::Auto).unwrap();
        assert_eq!(read(&to.join("a/b.txt")), "across\n");
        assert!(!from.exists());
        assert!(!w.root.join(format!(".ws-{n}.deepcli-partial")).exists());
    }
}

// ---------------------------------------------------------------------------------------------
// Crash recovery: each test builds the disk as a crash at one point would leave it, then calls
// again with the same entry name.

const ENTRY: &str = "a-20261130T053600Z";

/// The manifest `move_to_trash` writes before anything moves.
fn fresh_manifest(agent: &[TrashItem], created_at: &str) -> Manifest {
    Manifest {
        format_version: 1,
        agent_id: "a".into(),
        created_at: created_at.into(),
        serial: 3,
        items: agent
            .iter()
            .map(|i| ManifestItem {
                label: i.label.clone(),
                original: i.path.clone(),
                stored: i.label.clone(),
                moved: false,
                existed: true,
                files: None,
            })
            .collect(),
        kept: vec![],
    }
}

fn plant_manifest(w: &World, manifest: &Manifest) -> PathBuf {
    let dir = w.trash.join(ENTRY);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(manifest).unwrap(),
    )
    .unwrap();
    dir
}

fn resume(w: &World, agent: &[TrashItem]) -> Result<Manifest, TrashError> {
    trash::move_to_trash_with(
        &w.trash,
        ENTRY,
        "a",
        99,
        agent,
        &[],
        &w.guard(),
        Transfer::ForceCopy,
    )
}

#[test]
fn resume_after_the_manifest_was_written_keeps_its_time_and_serial() {
    let w = World::new();
    let agent = w.agent("a");
    plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    let manifest = resume(&w, &agent).unwrap();
    assert_eq!(manifest.created_at, "2026-11-30T05:36:00Z");
    assert_eq!(manifest.serial, 3);
    assert!(manifest.is_complete());
    assert!(!agent[0].path.exists());
}

#[test]
fn resume_after_a_crash_before_the_manifest_was_renamed() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = w.trash.join(ENTRY);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(".manifest.json.tmp"), "{\"format_ver").unwrap();
    let manifest = resume(&w, &agent).unwrap();
    assert!(manifest.is_complete());
    assert!(!dir.join(".manifest.json.tmp").exists());
}

#[test]
fn resume_after_a_move_the_manifest_does_not_know_about() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    // The rename of the workspace happened; the manifest rewrite did not.
    fs::rename(&agent[0].path, dir.join("workspace")).unwrap();
    let manifest = resume(&w, &agent).unwrap();
    assert!(manifest.items.iter().all(|i| i.moved));
    assert_eq!(read(&dir.join("workspace/SOUL.md")), "be kind\n");
}

#[test]
fn resume_redoes_an_interrupted_copy_from_its_staging_tree() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    write(&dir.join(".workspace.deepcli-partial/SOUL.md"), "be ki");
    let manifest = resume(&w, &agent).unwrap();
    assert!(manifest.is_complete());
    assert_eq!(read(&dir.join("workspace/SOUL.md")), "be kind\n");
    assert_eq!(
        read(&dir.join("workspace/memory/2026-11-30.md")),
        "remembered\n"
    );
    assert!(!dir.join(".workspace.deepcli-partial").exists());
    assert!(!agent[0].path.exists());
}

#[test]
fn resume_replaces_a_partial_copy_under_the_final_name() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    // Part of the original, identical: a copy cut short (the original is still there).
    write(&dir.join("workspace/SOUL.md"), "be kind\n");
    let manifest = resume(&w, &agent).unwrap();
    assert!(manifest.is_complete());
    assert_eq!(
        read(&dir.join("workspace/memory/2026-11-30.md")),
        "remembered\n"
    );
    assert!(!agent[0].path.exists());
}

#[test]
fn resume_finishes_removing_an_original_that_was_already_copied() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    // The verified copy is in place; removing the original stopped half way.
    copy_dir(&agent[0].path, &dir.join("workspace"));
    fs::remove_file(agent[0].path.join("SOUL.md")).unwrap();
    let manifest = resume(&w, &agent).unwrap();
    assert!(manifest.is_complete());
    assert!(!agent[0].path.exists());
    assert_eq!(read(&dir.join("workspace/SOUL.md")), "be kind\n");
}

#[test]
fn resume_keeps_both_when_original_and_copy_differ() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    write(&dir.join("workspace/SOUL.md"), "something else\n");
    let err = resume(&w, &agent).unwrap_err();
    assert!(matches!(err, TrashError::BothExist { .. }), "{err:?}");
    assert_eq!(read(&agent[0].path.join("SOUL.md")), "be kind\n");
    assert_eq!(read(&dir.join("workspace/SOUL.md")), "something else\n");
}

#[test]
fn an_entry_for_other_items_or_someone_elses_directory_is_not_reused() {
    let w = World::new();
    let agent = w.agent("a");
    plant_manifest(&w, &fresh_manifest(&agent[..1], "2026-11-30T05:36:00Z"));
    let err = resume(&w, &agent).unwrap_err();
    assert!(
        matches!(err, TrashError::ManifestMismatch { .. }),
        "{err:?}"
    );

    let foreign = w.trash.join("b-1");
    write(&foreign.join("notes.txt"), "mine\n");
    let err = trash::move_to_trash(&w.trash, "b-1", "a", 1, &agent, &[], &w.guard()).unwrap_err();
    assert!(matches!(err, TrashError::ForeignEntry { .. }), "{err:?}");
    assert!(agent[0].path.exists());
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Listing

#[test]
fn list_sorts_by_time_and_skips_unreadable_entries() {
    let w = World::new();
    assert!(trash::list(&w.trash).unwrap().is_empty());

    let a = w.agent("a");
    let b = w.agent("b");
    trash::move_to_trash(&w.trash, "b-2", "b", 1, &b, &[], &w.guard()).unwrap();
    trash::move_to_trash(&w.trash, "a-1", "a", 2, &a, &[], &w.guard()).unwrap();
    // Make b the older one, whatever the clock said.
    let mut manifest = trash::read_manifest(&w.trash.join("b-2")).unwrap();
    manifest.created_at = "2020-01-01T00:00:00Z".into();
    fs::write(
        w.trash.join("b-2/manifest.json"),
        serde_json::to_string(&manifest).unwrap(),
    )
    .unwrap();
    fs::create_dir_all(w.trash.join("junk")).unwrap();
    write(&w.trash.join("stray-file"), "");
    write(&w.trash.join("broken/manifest.json"), "{not json");

    let names: Vec<String> = trash::list(&w.trash)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["b-2", "a-1"]);

    let listing = trash::scan(&w.trash).unwrap();
    let unreadable: Vec<&str> = listing.unreadable.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(unreadable, ["broken", "junk"]);
    assert!(matches!(
        listing.unreadable[0].error,
        TrashError::ManifestUnreadable { .. }
    ));
}

// ---------------------------------------------------------------------------------------------
// Restoring

#[test]
fn restore_puts_everything_back_and_removes_the_entry() {
    let w = World::new();
    let agent = w.agent("a");
    trash_agent(&w, "a", &agent, Transfer::Auto);
    let manifest = trash::restore(&w.trash, ENTRY, &w.guard()).unwrap();
    assert_eq!(manifest.agent_id, "a");
    assert_eq!(read(&agent[0].path.join("SOUL.md")), "be kind\n");
    assert_eq!(read(&agent[1].path.join("auth.json")), "{}\n");
    assert_eq!(read(&agent[2].path.join("s1.jsonl")), "{\"turn\":1}\n");
    assert!(!w.trash.join(ENTRY).exists());
    assert!(trash::list(&w.trash).unwrap().is_empty());
}

#[test]
fn restore_refuses_when_an_original_exists_again() {
    let w = World::new();
    let agent = w.agent("a");
    trash_agent(&w, "a", &agent, Transfer::Auto);
    // The agent was added back and got a fresh workspace and sessions directory.
    write(&agent[0].path.join("SOUL.md"), "new\n");
    fs::create_dir_all(&agent[2].path).unwrap();

    let err = trash::restore(&w.trash, ENTRY, &w.guard()).unwrap_err();
    let TrashError::Conflicts { paths, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(paths, &[agent[0].path.clone(), agent[2].path.clone()]);
    let message = err.to_string();
    assert!(message.contains(&agent[0].path.display().to_string()));
    assert!(message.contains(&agent[2].path.display().to_string()));
    // Nothing moved: agentDir is still in the trash, the new workspace untouched.
    assert!(!agent[1].path.exists());
    assert!(w.trash.join(ENTRY).join("agentDir/auth.json").exists());
    assert_eq!(read(&agent[0].path.join("SOUL.md")), "new\n");
}

#[test]
fn restore_of_an_unknown_entry_points_at_trash_list() {
    let w = World::new();
    for name in ["nope", "../state"] {
        let err = trash::restore(&w.trash, name, &w.guard()).unwrap_err();
        assert!(matches!(err, TrashError::NoSuchEntry { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&format!("no trash entry named `{name}`")));
        assert!(message.contains("deepcli trash list"), "{message}");
    }
}

#[test]
fn restore_resumes_after_a_crash_half_way() {
    let w = World::new();
    let agent = w.agent("a");
    trash_agent(&w, "a", &agent, Transfer::Auto);
    let dir = w.trash.join(ENTRY);
    // The workspace went back; the manifest still says it is in the trash.
    fs::rename(dir.join("workspace"), &agent[0].path).unwrap();
    trash::restore(&w.trash, ENTRY, &w.guard()).unwrap();
    assert_eq!(read(&agent[0].path.join("SOUL.md")), "be kind\n");
    assert_eq!(read(&agent[1].path.join("auth.json")), "{}\n");
    assert!(!dir.exists());
}

#[test]
fn restore_finishes_an_interrupted_trash() {
    let w = World::new();
    let agent = w.agent("a");
    let dir = plant_manifest(&w, &fresh_manifest(&agent, "2026-11-30T05:36:00Z"));
    // Only the workspace reached the trash, and the manifest never said so.
    fs::rename(&agent[0].path, dir.join("workspace")).unwrap();
    trash::restore(&w.trash, ENTRY, &w.guard()).unwrap();
    assert_eq!(read(&agent[0].path.join("SOUL.md")), "be kind\n");
    assert!(agent[1].path.exists());
    assert!(!dir.exists());
}

#[test]
fn restore_reports_a_missing_stored_item_and_leaves_the_rest() {
    let w = World::new();
    let agent = w.agent("a");
    trash_agent(&w, "a", &agent, Transfer::Auto);
    let dir = w.trash.join(ENTRY);
    fs::remove_dir_all(dir.join("sessions")).unwrap();
    let err = trash::restore(&w.trash, ENTRY, &w.guard()).unwrap_err();
    assert!(matches!(err, TrashError::StoredMissing { .. }), "{err:?}");
    assert!(dir.join("workspace").exists());
    assert!(!agent[0].path.exists());
}

#[test]
fn restore_leaves_unknown_files_in_the_entry() {
    let w = World::new();
    let agent = w.agent("a");
    trash_agent(&w, "a", &agent, Transfer::Auto);
    let dir = w.trash.join(ENTRY);
    write(&dir.join("note-from-operator.txt"), "hi\n");
    let err = trash::restore(&w.trash, ENTRY, &w.guard()).unwrap_err();
    assert!(matches!(err, TrashError::EntryNotEmpty { .. }), "{err:?}");
    assert!(agent[0].path.exists());
    assert_eq!(read(&dir.join("note-from-operator.txt")), "hi\n");
}

#[test]
fn restore_refuses_a_manifest_edited_to_point_at_a_protected_directory() {
    let w = World::new();
    let agent = w.agent("a");
    trash_agent(&w, "a", &agent, Transfer::Auto);
    let dir = w.trash.join(ENTRY);
    let mut manifest = trash::read_manifest(&dir).unwrap();
    manifest.items[0].original = w.root.join("state/..");
    fs::write(
        dir.join("manifest.json"),
        serde_json::to_string(&manifest).unwrap(),
    )
    .unwrap();
    let err = trash::restore(&w.trash, ENTRY, &w.guard()).unwrap_err();
    assert!(matches!(err, TrashError::RestoreRefused { .. }), "{err:?}");
    assert!(dir.join("workspace").exists());
}

#[test]
fn refusal_messages_say_what_where_and_how_to_fix() {
    let w = World::new();
    let mut agent = w.agent("a");
    agent[1].path = w.home.clone();
    let err = trash::move_to_trash(&w.trash, ENTRY, "a", 1, &agent, &[], &w.guard()).unwrap_err();
    let message = err
        .to_string()
        .replace(&w.root.display().to_string(), "<tmp>");
    assert_eq!(
        message,
        "refusing to trash agent `a`: its agentDir `<tmp>/home` cannot be moved: it is a home \
         directory; nothing was moved\nhint: fix the agent's `workspace`/`agentDir` in \
         agents.yaml so that it points at a directory of its own, then apply again"
    );
    assert_eq!(
        w.guard().check(Path::new("/")).unwrap_err().to_string(),
        "`/` cannot be moved: it is the filesystem root"
    );
    let message = w.guard().check(&w.root).unwrap_err().to_string();
    assert_eq!(
        message.replace(&w.root.display().to_string(), "<tmp>"),
        "`<tmp>` cannot be moved: it contains a home directory `<tmp>/home`"
    );
}

// ---------------------------------------------------------------------------------------------
// A directory deepcli did not create: only its files move

/// A project folder that existed before deepcli, with the user's files and three of deepcli's
/// bootstrap files in it; the item moves deepcli's files (one of them already gone).
fn project(w: &World) -> (PathBuf, TrashItem) {
    let project = w.home.join("project");
    write(&project.join("README.md"), "the user's\n");
    write(&project.join("src/main.rs"), "fn main() {}\n");
    write(&project.join("AGENTS.md"), "deepcli's\n");
    write(&project.join("SOUL.md"), "edited by the user\n");
    let item = TrashItem {
        label: "workspace".into(),
        path: project.clone(),
        files: Some(vec![
            "AGENTS.md".into(),
            "SOUL.md".into(),
            "TOOLS.md".into(),
        ]),
    };
    (project, item)
}

fn kept_project(project: &Path) -> [Kept; 1] {
    [Kept {
        label: "workspace".into(),
        path: project.to_path_buf(),
        reason: "existed before deepcli".into(),
    }]
}

/// Regression (issue 15, item 3): the whole project folder went to trash.
#[test]
fn moving_only_deepclis_files_leaves_the_directory_and_restore_puts_them_back() {
    for transfer in [Transfer::Auto, Transfer::ForceCopy] {
        let w = World::new();
        let (project, item) = project(&w);
        let mut agent = w.agent("a");
        agent[0] = item;
        let manifest = trash::move_to_trash_with(
            &w.trash,
            ENTRY,
            "a",
            5,
            &agent,
            &kept_project(&project),
            &w.guard(),
            transfer,
        )
        .unwrap();
        assert_eq!(
            manifest.format_version, 2,
            "an entry older deepclis cannot read"
        );
        assert!(manifest.is_complete());
        let files = manifest.items[0].files.as_ref().unwrap();
        let flags: Vec<(&str, bool, bool)> = files
            .iter()
            .map(|f| (f.name.as_str(), f.moved, f.existed))
            .collect();
        assert_eq!(
            flags,
            [
                ("AGENTS.md", true, true),
                ("SOUL.md", true, true),
                ("TOOLS.md", false, false)
            ]
        );
        assert_eq!(manifest.items[0].original, project);
        assert_eq!(manifest.kept[0].reason, "existed before deepcli");
        // The folder and the user's files stay; deepcli's are in the entry.
        assert_eq!(read(&project.join("README.md")), "the user's\n");
        assert!(project.join("src/main.rs").exists());
        assert!(!project.join("AGENTS.md").exists() && !project.join("SOUL.md").exists());
        let stored = w.trash.join(ENTRY).join("workspace");
        assert_eq!(read(&stored.join("SOUL.md")), "edited by the user\n");
        assert_eq!(read(&stored.join("AGENTS.md")), "deepcli's\n");
        assert!(!agent[1].path.exists(), "agentDir moved whole");

        let listed = trash::list(&w.trash).unwrap();
        assert_eq!(listed[0].manifest, manifest);
        trash::restore_with(&w.trash, ENTRY, &w.guard(), transfer).unwrap();
        assert_eq!(read(&project.join("SOUL.md")), "edited by the user\n");
        assert_eq!(read(&project.join("AGENTS.md")), "deepcli's\n");
        assert!(!project.join("TOOLS.md").exists());
        assert_eq!(read(&agent[1].path.join("auth.json")), "{}\n");
        assert!(!w.trash.join(ENTRY).exists());
    }
}

#[test]
fn resume_after_a_file_moved_before_the_manifest_said_so() {
    let w = World::new();
    let (project, item) = project(&w);
    let agent = [item];
    let mut manifest = fresh_manifest(&agent, "2026-11-30T05:36:00Z");
    manifest.format_version = 2;
    manifest.items[0].files = Some(
        ["AGENTS.md", "SOUL.md", "TOOLS.md"]
            .iter()
            .map(|name| ManifestFile {
                name: name.to_string(),
                moved: false,
                existed: *name != "TOOLS.md",
            })
            .collect(),
    );
    let dir = plant_manifest(&w, &manifest);
    // AGENTS.md reached the trash; the crash came before the manifest was rewritten. SOUL.md
    // was copied across filesystems and the original not yet removed.
    write(&dir.join("workspace/AGENTS.md"), "deepcli's\n");
    fs::remove_file(project.join("AGENTS.md")).unwrap();
    write(&dir.join("workspace/SOUL.md"), "edited by the user\n");
    let manifest = resume(&w, &agent).unwrap();
    assert!(manifest.is_complete());
    assert_eq!(manifest.created_at, "2026-11-30T05:36:00Z");
    assert!(!project.join("SOUL.md").exists());
    assert_eq!(read(&dir.join("workspace/SOUL.md")), "edited by the user\n");
    assert_eq!(read(&dir.join("workspace/AGENTS.md")), "deepcli's\n");
    assert_eq!(read(&project.join("README.md")), "the user's\n");

    // Asking for other files than the entry holds is not a resume.
    let mut other = agent.clone();
    other[0].files = Some(vec!["AGENTS.md".into()]);
    let err = resume(&w, &other).unwrap_err();
    assert!(
        matches!(err, TrashError::ManifestMismatch { .. }),
        "{err:?}"
    );
}

/// The plan shows no file where the user put a directory in place of one of deepcli's files;
/// the move must not take it either.
#[test]
fn a_directory_in_place_of_deepclis_file_stays() {
    let w = World::new();
    let (project, item) = project(&w);
    write(&project.join("TOOLS.md/mine.txt"), "the user's\n");
    let manifest = trash_agent(&w, "a", &[item], Transfer::Auto);
    let tools = &manifest.items[0].files.as_ref().unwrap()[2];
    assert!(!tools.moved && !tools.existed, "{tools:?}");
    assert_eq!(read(&project.join("TOOLS.md/mine.txt")), "the user's\n");
    trash::restore(&w.trash, ENTRY, &w.guard()).unwrap();
    assert_eq!(read(&project.join("TOOLS.md/mine.txt")), "the user's\n");
    assert_eq!(read(&project.join("AGENTS.md")), "deepcli's\n");
}

#[test]
fn restoring_a_file_refuses_when_it_exists_again() {
    let w = World::new();
    let (project, item) = project(&w);
    trash_agent(&w, "a", &[item], Transfer::Auto);
    write(&project.join("SOUL.md"), "written since\n");
    let err = trash::restore(&w.trash, ENTRY, &w.guard()).unwrap_err();
    let TrashError::Conflicts { paths, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(paths, &[project.join("SOUL.md")]);
    assert!(!project.join("AGENTS.md").exists(), "nothing moved back");
    assert_eq!(read(&project.join("SOUL.md")), "written since\n");
    assert!(w.trash.join(ENTRY).join("workspace/AGENTS.md").exists());
}

#[test]
fn file_names_must_be_plain_and_files_may_not_lie_inside_a_moved_directory() {
    let w = World::new();
    let (project, mut item) = project(&w);
    for bad in ["../escape", ".hidden", "", "a/b"] {
        item.files = Some(vec![bad.into()]);
        let err = trash::move_to_trash(&w.trash, ENTRY, "a", 1, &[item.clone()], &[], &w.guard())
            .unwrap_err();
        assert!(
            matches!(err, TrashError::BadFileName { .. }),
            "{bad}: {err:?}"
        );
    }
    // A directory that moves whole may not hold a file that moves on its own.
    let outer = w.root.join("outer");
    write(&outer.join("ws/AGENTS.md"), "deepcli's\n");
    let nested = [
        TrashItem::whole("agentDir", &outer),
        TrashItem {
            label: "workspace".into(),
            path: outer.join("ws"),
            files: Some(vec!["AGENTS.md".into()]),
        },
    ];
    let err = trash::move_to_trash(&w.trash, ENTRY, "a", 1, &nested, &[], &w.guard()).unwrap_err();
    let TrashError::Overlap {
        outer: o, inner, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((o, inner), (&outer, &outer.join("ws/AGENTS.md")));
    assert!(outer.join("ws/AGENTS.md").exists());
    assert!(!w.trash.exists(), "nothing moved");
    assert!(project.join("AGENTS.md").exists());
}

#[test]
fn deepclis_own_files_may_leave_a_system_tree_but_not_the_trash() {
    let w = World::new();
    let guard = w.guard();
    assert!(guard.check(Path::new("/etc")).is_err());
    assert!(guard.check_file(Path::new("/etc/AGENTS.md")).is_ok());
    assert!(guard.check_file(Path::new("relative/AGENTS.md")).is_err());
    let in_trash = w.trash.join("x-1/workspace/AGENTS.md");
    let err = guard.check_file(&in_trash).unwrap_err();
    assert!(err.to_string().contains("inside deepcli's trash"), "{err}");
}

#[test]
fn a_manifest_from_a_newer_deepcli_is_refused() {
    let w = World::new();
    let agent = w.agent("a");
    let mut manifest = fresh_manifest(&agent, "2026-11-30T05:36:00Z");
    manifest.format_version = 3;
    let dir = plant_manifest(&w, &manifest);
    let err = trash::read_manifest(&dir).unwrap_err();
    assert!(
        matches!(err, TrashError::ManifestVersion { found: 3, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade deepcli"), "{err}");
}
