use std::path::{Path, PathBuf};

use super::*;
use crate::config::model::{SandboxBind, WorkspaceAccess};

fn around() -> Surroundings {
    Surroundings {
        state_dir: "/srv/hub/state".into(),
        config_dir: "/srv/hub/config".into(),
        agents: vec![
            (
                "a".into(),
                "/srv/hub/state/workspaces/a".into(),
                "/srv/hub/state/agents/a/agent".into(),
            ),
            (
                "b".into(),
                "/work/b".into(),
                "/srv/hub/state/agents/b/agent".into(),
            ),
        ],
        user_home: Some("/home/op".into()),
        secret_files: vec![],
    }
}

fn layout(config: Option<SandboxConfig>) -> Option<Layout> {
    layout_in(config, &around())
}

/// The layout of agent `a` (its dirs in the state directory) among `around`.
fn layout_in(config: Option<SandboxConfig>, around: &Surroundings) -> Option<Layout> {
    let command = vec!["/usr/bin/true".to_string()];
    Layout::of(
        &Subject {
            agent_id: "a",
            workspace: Path::new("/srv/hub/state/workspaces/a"),
            agent_dir: Path::new("/srv/hub/state/agents/a/agent"),
            home: Path::new("/srv/hub/state/agents/a/agent/home"),
            command: &command,
            cwd: Path::new("/srv/hub/state/workspaces/a"),
            config: config.as_ref(),
        },
        around,
    )
}

fn binds(mounts: &[Mount]) -> Vec<(PathBuf, bool)> {
    mounts
        .iter()
        .filter_map(|m| match m {
            Mount::Bind { path, writable, .. } => Some((path.clone(), *writable)),
            Mount::Empty { .. } | Mount::Unreadable { .. } => None,
        })
        .collect()
}

#[test]
fn mode_off_has_no_layout_and_the_default_is_on() {
    let off = SandboxConfig {
        mode: Some(SandboxMode::Off),
        ..SandboxConfig::default()
    };
    assert!(layout(Some(off)).is_none());
    let on = layout(None).expect("sandboxed by default");
    assert_eq!(on.network, Network::Host);
    assert_eq!(on.backend, SandboxBackend::Auto);
}

#[test]
fn the_state_dir_and_other_agents_are_hidden_but_its_own_dirs_are_not() {
    let layout = layout(None).unwrap();
    assert!(layout.hidden.contains(&PathBuf::from("/srv/hub/state")));
    // b's workspace is in no grant of a's: never mounted, nothing to hide.
    assert!(!layout.hidden.contains(&PathBuf::from("/work/b")));
    let with_bind = super::Layout::of(
        &Subject {
            agent_id: "a",
            workspace: Path::new("/srv/hub/state/workspaces/a"),
            agent_dir: Path::new("/srv/hub/state/agents/a/agent"),
            home: Path::new("/srv/hub/state/agents/a/agent/home"),
            command: &["/usr/bin/true".to_string()],
            cwd: Path::new("/srv/hub/state/workspaces/a"),
            config: Some(&SandboxConfig {
                binds: Some(vec![SandboxBind {
                    path: "/work".into(),
                    mode: BindMode::Ro,
                }]),
                ..SandboxConfig::default()
            }),
        },
        &around(),
    )
    .unwrap();
    assert!(
        with_bind.hidden.contains(&PathBuf::from("/work/b")),
        "a bind holding another agent's workspace does not uncover it"
    );
    assert!(
        !layout
            .hidden
            .iter()
            .any(|h| h.starts_with("/srv/hub/state/workspaces/a"))
    );
    let writable: Vec<PathBuf> = layout
        .grants
        .iter()
        .filter(|g| g.writable)
        .map(|g| g.path.clone())
        .collect();
    assert_eq!(
        writable,
        [
            PathBuf::from("/srv/hub/state/workspaces/a"),
            PathBuf::from("/srv/hub/state/agents/a/agent"),
            PathBuf::from("/srv/hub/state/agents/a/agent/home"),
        ]
    );
    assert!(
        layout
            .grants
            .iter()
            .any(|g| g.path == Path::new("/srv/hub/config") && !g.writable),
        "the config directory is readable, never writable"
    );
}

#[test]
fn own_dirs_are_mounted_after_the_emptiness_over_the_state_dir() {
    // Only existing hidden paths are mounted over: use real directories.
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let own = state.join("workspaces/a");
    let other = root.path().join("checkout/b-workspace");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let layout = Layout {
        agent_id: "a".into(),
        backend: SandboxBackend::Auto,
        grants: vec![
            Grant {
                path: root.path().join("checkout"),
                writable: false,
                why: "the runtime's command",
            },
            Grant {
                path: own.clone(),
                writable: true,
                why: "its workspace",
            },
            Grant {
                // Inside a hidden path and not its own: left out.
                path: state.join("operator-token"),
                writable: false,
                why: "sandbox.binds",
            },
        ],
        hidden: vec![state.clone(), other.clone()],
        scratch: None,
        network: Network::Host,
        home: own.clone(),
    };
    let mounts = layout.mounts();
    let position = |m: &Mount| mounts.iter().position(|x| x == m).unwrap();
    let hide_state = Mount::Empty {
        path: state.clone(),
    };
    let own_bind = Mount::Bind {
        path: own.clone(),
        writable: true,
        optional: false,
    };
    let checkout = Mount::Bind {
        path: root.path().join("checkout"),
        writable: false,
        optional: true,
    };
    assert!(
        position(&checkout)
            < position(&Mount::Empty {
                path: other.clone()
            })
    );
    assert!(position(&hide_state) < position(&own_bind));
    assert!(
        !binds(&mounts)
            .iter()
            .any(|(p, _)| p.ends_with("operator-token")),
        "{mounts:?}"
    );
}

#[test]
fn a_secret_file_the_agent_could_read_is_hidden_and_unreadable_under_bubblewrap() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    let bound = root.path().join("shared");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(&bound).unwrap();
    let beside_config = config.join("slack.token");
    let in_bind = bound.join("cluster-token");
    let elsewhere = root.path().join("vault/peer.token");
    for file in [&beside_config, &in_bind] {
        std::fs::write(file, "secret").unwrap();
    }
    let around = Surroundings {
        config_dir: config.clone(),
        secret_files: vec![
            "/etc/deepcli/cluster-token".into(),
            beside_config.clone(),
            in_bind.clone(),
            elsewhere.clone(),
        ],
        ..around()
    };
    let sandbox = SandboxConfig {
        binds: Some(vec![SandboxBind {
            path: bound.display().to_string(),
            mode: BindMode::Ro,
        }]),
        ..SandboxConfig::default()
    };
    let layout = layout_in(Some(sandbox), &around).unwrap();
    // Hidden where it could be read: under /etc, beside the config, in a bind; a file no
    // grant reaches needs nothing.
    for file in [
        Path::new("/etc/deepcli/cluster-token"),
        &beside_config,
        &in_bind,
    ] {
        assert!(
            layout.hidden.iter().any(|h| h == file),
            "{file:?}: {layout:?}"
        );
    }
    assert!(!layout.hidden.contains(&elsewhere), "{layout:?}");
    // bubblewrap puts /dev/null (which no sandbox may open) over each existing file, after
    // the grant that holds it.
    let args: Vec<String> = bwrap::args(&layout, Path::new("/"), None)
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    for file in [&beside_config, &in_bind] {
        let file = file.display().to_string();
        let at = args
            .windows(3)
            .position(|w| w == ["--ro-bind", "/dev/null", file.as_str()])
            .unwrap_or_else(|| panic!("{file} not masked: {args:?}"));
        let grant = args
            .iter()
            .position(|a| file.starts_with(a.as_str()) && a.len() > 1);
        assert!(
            grant.is_some_and(|g| g < at),
            "{file} masked before its grant: {args:?}"
        );
    }
    // Landlock only grants: it cannot hide a file inside /etc or a grant.
    assert!(
        layout
            .beyond_landlock()
            .is_some_and(|why| why.contains("must stay hidden"))
    );
}

#[test]
fn workspace_access_none_gives_an_empty_private_workspace() {
    let layout = layout(Some(SandboxConfig {
        workspace_access: Some(WorkspaceAccess::None),
        ..SandboxConfig::default()
    }))
    .unwrap();
    assert_eq!(
        layout.scratch.as_deref(),
        Some(Path::new("/srv/hub/state/workspaces/a"))
    );
    assert!(!layout.grants.iter().any(|g| g.why == "its workspace"));
}

#[test]
fn binds_resolve_tilde_and_keep_their_mode() {
    let layout = layout(Some(SandboxConfig {
        binds: Some(vec![
            SandboxBind {
                path: "~/datasets".into(),
                mode: BindMode::Ro,
            },
            SandboxBind {
                path: "/var/cache/models".into(),
                mode: BindMode::Rw,
            },
        ]),
        ..SandboxConfig::default()
    }))
    .unwrap();
    let got: Vec<(PathBuf, bool)> = layout
        .grants
        .iter()
        .filter(|g| g.why == "sandbox.binds")
        .map(|g| (g.path.clone(), g.writable))
        .collect();
    assert_eq!(
        got,
        [
            (PathBuf::from("/home/op/datasets"), false),
            (PathBuf::from("/var/cache/models"), true),
        ]
    );
}

#[test]
fn an_npm_agent_reads_its_package_and_a_linked_node_modules() {
    let root = tempfile::tempdir().unwrap();
    let root = real(root.path());
    let package = root.join("agent");
    let modules = root.join("elsewhere/node_modules");
    std::fs::create_dir_all(package.join("bin")).unwrap();
    std::fs::create_dir_all(modules.join("dep")).unwrap();
    std::fs::write(package.join("package.json"), "{}").unwrap();
    std::fs::write(package.join("bin/agent.mjs"), "").unwrap();
    std::os::unix::fs::symlink(&modules, package.join("node_modules")).unwrap();
    let command = vec!["node".to_string(), "bin/agent.mjs".to_string()];
    let paths = command_paths(&command, &package);
    assert_eq!(paths, [package.clone(), modules.clone()]);

    // A program inside node_modules: the folder holding the outermost node_modules.
    let bin = root.join("proj/node_modules/.bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("tool"), "").unwrap();
    let command = vec![bin.join("tool").display().to_string()];
    assert_eq!(command_paths(&command, &root), [root.join("proj")]);

    // A lone binary outside any package: the file alone.
    std::fs::write(root.join("lone"), "").unwrap();
    let command = vec![root.join("lone").display().to_string(), "--flag".into()];
    assert_eq!(command_paths(&command, &root), [root.join("lone")]);
}

#[test]
fn only_the_named_environment_passes_through() {
    for name in ["PATH", "LANG", "LC_ALL", "TZ", "TERM"] {
        assert!(passes_through(name), "{name}");
    }
    for name in [
        "SLACK_BOT_TOKEN",
        "DEEPCLI_OPERATOR_TOKEN",
        "HOME",
        "OPENAI_API_KEY",
        "LD_PRELOAD",
    ] {
        assert!(!passes_through(name), "{name}");
    }
}

/// A host with bubblewrap (or without), Landlock ABI 7 and a cgroup to hold runtimes.
fn host(bwrap: bool) -> Host {
    Host {
        bwrap: if bwrap {
            Ok("/usr/bin/bwrap".into())
        } else {
            Err("`bwrap` not found on PATH".into())
        },
        landlock: Ok(7),
        cgroup: Ok("/sys/fs/cgroup/deepcli.service".into()),
    }
}

fn with(config: SandboxConfig) -> Layout {
    layout(Some(config)).unwrap()
}

/// The layout of agent `a` with a bind holding the state directory: what Landlock cannot hide.
fn hiding() -> Layout {
    with(SandboxConfig {
        binds: Some(vec![SandboxBind {
            path: "/srv/hub".into(),
            mode: BindMode::Ro,
        }]),
        ..SandboxConfig::default()
    })
}

#[test]
fn unbuilt_backends_fail_closed() {
    let layout = layout(None).unwrap();
    assert!(choose(&layout, &host(false)).is_ok());
    let neither = Host {
        landlock: Err("the kernel has no Landlock".into()),
        ..host(false)
    };
    let error_neither = choose(&layout, &neither).unwrap_err();
    assert!(
        error_neither.why.contains("install bubblewrap"),
        "{error_neither}"
    );
    assert!(
        error_neither.why.contains("the kernel has no Landlock"),
        "{error_neither}"
    );
    assert_eq!(choose(&layout, &host(true)).unwrap().backend, BWRAP);
    let docker = Layout {
        backend: SandboxBackend::Docker,
        ..layout.clone()
    };
    assert!(choose(&docker, &host(true)).is_err());
}

#[test]
fn auto_takes_bubblewrap_wherever_it_is_usable() {
    for layout in [layout(None).unwrap(), hiding()] {
        let choice = choose(&layout, &host(true)).unwrap();
        assert_eq!(choice.backend, BWRAP);
        assert!(choice.why.starts_with("auto: bubblewrap"), "{}", choice.why);
    }
}

#[test]
fn auto_without_bubblewrap_takes_landlock_for_a_layout_that_hides_nothing_inside_a_grant() {
    let layout = layout(None).unwrap();
    assert_eq!(layout.hidden_inside(), []);
    let choice = choose(&layout, &host(false)).unwrap();
    assert_eq!(choice.backend, LANDLOCK);
    assert!(
        choice.why.contains("bubblewrap is not usable here") && choice.why.contains("ABI 7"),
        "{}",
        choice.why
    );
    let none = with(SandboxConfig {
        network: Some(SandboxNetwork::None),
        ..SandboxConfig::default()
    });
    assert_eq!(choose(&none, &host(false)).unwrap().backend, LANDLOCK);
    assert_eq!(
        summary(&none, &host(false)),
        "all (landlock, network none; not contained: UDP and Unix sockets, the process list)"
    );
}

#[test]
fn landlock_is_never_chosen_for_a_state_directory_inside_a_readable_tree() {
    let layout = hiding();
    assert_eq!(
        layout.hidden_inside(),
        [(Path::new("/srv/hub/state"), Path::new("/srv/hub"))]
    );
    // auto: fails closed with both reasons and the fix.
    let error = choose(&layout, &host(false)).unwrap_err();
    assert!(
        error
            .why
            .contains("/srv/hub/state must stay hidden but lies inside /srv/hub"),
        "{error}"
    );
    assert!(error.why.contains("install bubblewrap"), "{error}");
    // Explicit: the same, even with bubblewrap there.
    let explicit = Layout {
        backend: SandboxBackend::Landlock,
        ..layout
    };
    let error = choose(&explicit, &host(true)).unwrap_err();
    assert!(
        error.why.contains("the landlock backend cannot enforce")
            && error.why.contains("Landlock only grants access"),
        "{error}"
    );
    assert_eq!(
        summary(&explicit, &host(true)),
        "all (not applied, network host)"
    );
}

#[test]
fn explicit_landlock_runs_where_it_can_enforce_the_layout_even_with_bubblewrap_there() {
    let layout = with(SandboxConfig {
        backend: Some(SandboxBackend::Landlock),
        ..SandboxConfig::default()
    });
    let choice = choose(&layout, &host(true)).unwrap();
    assert_eq!(choice.backend, LANDLOCK);
    assert!(
        choice.why.starts_with("sandbox.backend: landlock"),
        "{}",
        choice.why
    );
}

#[test]
fn landlock_refuses_what_it_cannot_enforce() {
    let cases = [
        (
            SandboxConfig {
                network: Some(SandboxNetwork::Allowlist),
                allowed_domains: Some(vec!["api.example.com".into()]),
                ..SandboxConfig::default()
            },
            "`network: allowlist` needs bubblewrap",
        ),
        (
            SandboxConfig {
                workspace_access: Some(WorkspaceAccess::None),
                ..SandboxConfig::default()
            },
            "`workspaceAccess: none`",
        ),
    ];
    for (config, why) in cases {
        let layout = with(config);
        let error = choose(&layout, &host(false)).unwrap_err();
        assert!(error.why.contains(why), "{error}");
    }
    let layout = layout(None).unwrap();
    let hosts = [
        (
            Host {
                landlock: Ok(5),
                ..host(false)
            },
            "Landlock ABI is 5, and deepcli needs ABI 6",
        ),
        (
            Host {
                cgroup: Err("no cgroup v2 file system is mounted".into()),
                ..host(false)
            },
            "no cgroup v2 group can be made",
        ),
    ];
    for (host, why) in hosts {
        let error = choose(&layout, &host).unwrap_err();
        assert!(error.why.contains(why), "{error}");
    }
}

#[test]
fn the_landlock_restriction_grants_what_the_mounts_would_bind() {
    let layout = with(SandboxConfig {
        network: Some(SandboxNetwork::None),
        workspace_access: Some(WorkspaceAccess::Ro),
        ..SandboxConfig::default()
    });
    let spec = landlock::Spec::of(&layout, Path::new("/t/tmp"), Path::new("/cg/a"));
    assert!(!spec.tcp);
    assert!(spec.read.contains(&PathBuf::from("/usr")));
    assert!(spec.read.contains(&PathBuf::from("/proc")));
    assert!(spec.read.contains(&PathBuf::from("/srv/hub/config")));
    assert!(
        spec.read
            .contains(&PathBuf::from("/srv/hub/state/workspaces/a"))
    );
    assert!(
        spec.write
            .contains(&PathBuf::from("/srv/hub/state/agents/a/agent/home"))
    );
    assert!(spec.write.contains(&PathBuf::from("/t/tmp")));
    assert!(spec.write.contains(&PathBuf::from("/dev/null")));
    for path in spec.read.iter().chain(&spec.write) {
        assert!(
            !layout.hidden.iter().any(|h| h == path),
            "{} is hidden",
            path.display()
        );
    }
    assert_eq!(spec.cgroup, PathBuf::from("/cg/a"));
    let host_network = with(SandboxConfig::default());
    assert!(landlock::Spec::of(&host_network, Path::new("/t"), Path::new("/c")).tcp);
}
