//! The `deepcli` binary end to end: exit codes and snapshots of every output format.

use std::path::Path;

use assert_cmd::Command;

fn deepcli() -> Command {
    let mut cmd = Command::cargo_bin("deepcli").unwrap();
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("HOME", "/home/operator")
        .env("DEEPCLI_STATE_DIR", "/srv/deepcli-state")
        .env_remove("DEEPCLI_CONFIG")
        .env_remove("NO_COLOR");
    cmd
}

fn validate(dir: &str, format: &str) -> (i32, String) {
    let out = deepcli()
        .args(["validate", "--config", dir, "--format", format])
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn the_examples_validate_clean() {
    for dir in ["examples/quickstart", "examples/multi-account-slack"] {
        let out = deepcli()
            .args(["validate", "--strict", "--config", dir])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{dir}:\n{stdout}");
        assert!(
            stdout.contains("0 errors, 0 warnings in 3 files"),
            "{stdout}"
        );
    }
}

#[test]
fn broken_human() {
    let (code, out) = validate("examples/broken", "human");
    assert_eq!(code, 1);
    assert!(!out.contains('\x1b'), "no colour when piped");
    insta::assert_snapshot!(out);
}

#[test]
fn broken_json() {
    let (code, out) = validate("examples/broken", "json");
    assert_eq!(code, 1);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["formatVersion"], "2");
    assert_eq!(doc["valid"], false);
    insta::assert_snapshot!(out);
}

#[test]
fn broken_github() {
    let (code, out) = validate("examples/broken", "github");
    assert_eq!(code, 1);
    assert!(
        out.lines()
            .all(|l| l.starts_with("::error ") || l.starts_with("::warning "))
    );
    insta::assert_snapshot!(out);
}

#[test]
fn broken_sarif() {
    let (code, out) = validate("examples/broken", "sarif");
    assert_eq!(code, 1);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["version"], "2.1.0");
    let rules = doc["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert_eq!(
        rules.len(),
        deepcli::diagnostic::rules::ALL.len(),
        "one rule entry per rule id"
    );
    insta::assert_snapshot!(out.replace(env!("CARGO_PKG_VERSION"), "[VERSION]"));
}

#[test]
fn the_broken_example_shows_every_semantic_rule() {
    let (_, out) = validate("examples/broken", "json");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let found: std::collections::BTreeSet<&str> = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["rule"].as_str().unwrap())
        .collect();
    // File-level failures (syntax, size, encoding) stop a file, so they have fixtures instead.
    let file_level = [
        "unreadable-file",
        "file-too-large",
        "non-utf8",
        "yaml-syntax",
        "yaml-tab",
        "duplicate-key",
        "alias-limit",
        "yaml-too-deep",
        "nothing-declared",
        "duplicate-account",
    ];
    for rule in deepcli::diagnostic::rules::ALL {
        if !file_level.contains(&rule.id) {
            assert!(
                found.contains(rule.id),
                "examples/broken does not show {}",
                rule.id
            );
        }
    }
}

#[test]
fn strict_turns_warnings_into_failure() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bindings.yaml"),
        "bindings:\n  - agentId: main\n    match: {channel: cli, peer: {kind: dm, id: \"1\"}}\n",
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    deepcli()
        .args(["validate", "--config", path])
        .assert()
        .code(0);
    deepcli()
        .args(["validate", "--strict", "--config", path])
        .assert()
        .code(1);
}

#[test]
fn could_not_run_exits_2() {
    deepcli()
        .args(["validate", "--config", "/nonexistent/deepcli"])
        .assert()
        .code(2);
    deepcli()
        .args(["validate", "--format", "xml"])
        .assert()
        .code(2);
}

#[test]
fn config_comes_from_the_environment() {
    deepcli()
        .env("DEEPCLI_CONFIG", "examples/quickstart")
        .arg("validate")
        .assert()
        .code(0);
}

#[test]
fn an_empty_directory_warns_that_nothing_is_declared() {
    let dir = tempfile::tempdir().unwrap();
    let out = deepcli()
        .args(["validate", "--config", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing declared fails validate"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("warning[nothing-declared]"));
}

#[test]
fn schema_prints_the_embedded_schemas() {
    for (name, file) in [
        ("agents", "schema/agents.schema.json"),
        ("channels", "schema/channels.schema.json"),
        ("bindings", "schema/bindings.schema.json"),
    ] {
        let out = deepcli().args(["schema", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let on_disk =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), on_disk);
    }
}

#[test]
fn inline_secrets_never_reach_the_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("channels.yaml"),
        "channels:\n  telegram:\n    accounts:\n      default: {botToken: \"777:SUPERSECRET\", dmPolicy: open}\n",
    )
    .unwrap();
    for format in ["human", "json", "github", "sarif"] {
        let (code, out) = validate(dir.path().to_str().unwrap(), format);
        assert_eq!(code, 1);
        assert!(out.contains("inline-secret"), "{format}");
        assert!(
            !out.contains("SUPERSECRET"),
            "{format} leaks the secret:\n{out}"
        );
    }
}

/// The top-level help: commands, global options, exit codes. A flag without a description shows
/// up here in review.
#[test]
fn help() {
    let out = deepcli().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

/// One command's help: its own flags, then the global options it reads.
#[test]
fn help_agents_add() {
    let out = deepcli()
        .args(["agents", "add", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

/// Every command, flag and positional of `deepcli` has a description: `channels add
/// --bot-token`, `agents add --workspace` and others had none.
#[test]
fn every_command_and_argument_has_help_text() {
    let mut command = deepcli::cli_command();
    command.build();
    let mut missing = Vec::new();
    undescribed(&command, "deepcli", &mut missing);
    assert!(
        missing.is_empty(),
        "without help text:\n  {}",
        missing.join("\n  ")
    );
}

fn undescribed(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
    if command.get_about().is_none() && !command.is_hide_set() {
        missing.push(path.to_string());
    }
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let name = arg
            .get_long()
            .map(|l| format!("--{l}"))
            .unwrap_or_else(|| format!("<{}>", arg.get_id()));
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            missing.push(format!("{path} {name}"));
        }
    }
    for sub in command.get_subcommands() {
        undescribed(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

fn broken_human_with(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = deepcli();
    cmd.env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR")
        .args(["validate", "--config", "examples/broken"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    String::from_utf8(cmd.output().unwrap().stdout).unwrap()
}

/// `--color auto|always|never`; auto follows NO_COLOR and CLICOLOR_FORCE, the flag wins over
/// both.
#[test]
fn color_flag_and_environment() {
    let coloured = |s: &str| s.contains('\x1b');
    assert!(!coloured(&broken_human_with(&[], &[])), "auto: a pipe");
    assert!(coloured(&broken_human_with(
        &[],
        &[("CLICOLOR_FORCE", "1")]
    )));
    assert!(!coloured(&broken_human_with(
        &[],
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]
    )));
    assert!(coloured(&broken_human_with(&["--color", "always"], &[])));
    assert!(coloured(&broken_human_with(
        &["--color=always"],
        &[("NO_COLOR", "1")]
    )));
    assert!(!coloured(&broken_human_with(
        &["--color", "never"],
        &[("CLICOLOR_FORCE", "1")]
    )));
    // clap's help is printed before the arguments are read; it follows the flag too.
    let help = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = deepcli();
        cmd.env_remove("CLICOLOR_FORCE").args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    };
    assert!(coloured(&help(&["--color", "always", "--help"], &[])));
    assert!(!coloured(&help(
        &["agents", "--help", "--color=never"],
        &[("CLICOLOR_FORCE", "1")]
    )));
    deepcli()
        .args(["--color", "sometimes", "schema", "agents"])
        .assert()
        .code(2);
}

/// A command that does not read a global directory flag does not show it (`status` reads no
/// config, `schema` neither directory), and still accepts it, so that an alias can pass the
/// same flags to every command.
#[test]
fn help_shows_only_the_global_flags_a_command_reads() {
    let help = |args: &[&str]| {
        let out = deepcli().args(args).arg("--help").output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let status = help(&["status"]);
    assert!(!status.contains("--config"), "{status}");
    assert!(status.contains("--state-dir"), "{status}");
    assert!(status.contains("Global options:"), "{status}");
    let export = help(&["state", "export"]);
    assert!(!export.contains("--config"), "{export}");
    let schema = help(&["schema"]);
    assert!(
        !schema.contains("--config") && !schema.contains("--state-dir"),
        "{schema}"
    );
    assert!(
        schema.contains("--quiet") && schema.contains("--color"),
        "{schema}"
    );
    // import openclaw writes into the config directory unless --out says otherwise, and
    // validates the files with the state directory; export reads both as well.
    for command in [&["import", "openclaw"][..], &["export", "openclaw"]] {
        let text = help(command);
        assert!(
            text.contains("--config <DIR>") && text.contains("--state-dir <DIR>"),
            "{command:?}: {text}"
        );
    }
    assert!(
        help(&["import", "openclaw"]).contains("[default: the config directory, --config]"),
        "--out's default"
    );
    let restore = help(&["trash", "restore"]);
    assert!(
        restore.contains("--config"),
        "restore reads the config: {restore}"
    );
    // `route` prints the same whatever the state; `validate` reads it, and says why.
    let route = help(&["route"]);
    assert!(!route.contains("--state-dir"), "{route}");
    let validate = help(&["validate"]);
    assert!(
        validate.contains("agents' default workspaces lie in it"),
        "{validate}"
    );
    let out = deepcli()
        .args([
            "--config", "nowhere", "schema", "bindings", "--config", "nowhere",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn completions_and_the_man_page_know_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = deepcli().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for command in [
            "demo-agent",
            "sessions",
            "approvals",
            "tasks",
            "completions",
        ] {
            assert!(script.contains(command), "{shell} completes no `{command}`");
        }
    }
    let out = deepcli().arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.starts_with(".ie") && page.contains(".TH deepcli 1"),
        "{page}"
    );
    assert!(page.contains("demo\\-agent") && page.contains("approvals"));
    let out = deepcli().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn help_lists_the_demo_agent_and_hides_nothing() {
    let out = deepcli().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for command in ["demo-agent", "hub", "completions", "man"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "`deepcli --help` lists no `{command}`:\n{help}"
        );
    }
}

#[test]
fn a_mistyped_peer_kind_is_refused_before_anything_runs() {
    for command in [
        &[
            "route",
            "--config",
            "examples/quickstart",
            "--channel",
            "telegram",
            "--peer",
            "grp:123",
        ][..],
        &[
            "inbound",
            "send",
            "--channel",
            "telegram",
            "--peer",
            "grp:123",
            "hello",
        ][..],
    ] {
        let out = deepcli().args(command).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("unknown peer kind `grp`: KIND is direct (or dm), group or channel"),
            "{stderr}"
        );
    }
    let out = deepcli()
        .args([
            "route",
            "--config",
            "examples/quickstart",
            "--channel",
            "telegram",
        ])
        .args(["--peer", "groupe:123"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("(did you mean `group`?)"));
}

#[test]
fn pairing_list_on_a_state_directory_that_does_not_exist_says_so() {
    let out = deepcli().args(["pairing", "list"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no deepcli state in `/srv/deepcli-state`"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn pairing_names_its_channel_with_the_flag_or_first() {
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = deepcli()
            .args(["--state-dir", state.path().to_str().unwrap(), "pairing"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["approve", "ABCD2345"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("which channel? pass --channel NAME"),
        "{stderr}"
    );
    let (code, stderr) = run(&["approve", "slack", "--channel", "telegram", "ABCD2345"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("two channels: `slack` and --channel telegram"),
        "{stderr}"
    );
    // Both forms reach the state: no request has the code there.
    for args in [
        &["approve", "--channel", "telegram", "ABCD2345"][..],
        &["approve", "telegram", "ABCD2345"],
    ] {
        let (code, stderr) = run(args);
        assert!(
            stderr.contains("channel `telegram`") || stderr.contains("no deepcli state"),
            "{args:?}: {stderr}"
        );
        assert_ne!(code, Some(0));
    }
}

/// `channels set` writes one policy key at the level it is told, keeps the file's comments,
/// and writes nothing when the result would not validate or the request is wrong.
#[test]
fn channels_set_writes_a_policy_key_at_its_level_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().to_str().unwrap();
    let channels = "channels:\n  telegram:\n    # the one bot\n    accounts:\n      default:\n        botToken: {source: env, id: TG}\n";
    std::fs::write(dir.path().join("channels.yaml"), channels).unwrap();
    std::fs::write(
        dir.path().join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n",
    )
    .unwrap();
    let set = |args: &[&str]| {
        let out = deepcli()
            .args(["--config", config, "channels", "set"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let file = || std::fs::read_to_string(dir.path().join("channels.yaml")).unwrap();

    assert_eq!(
        set(&["--channel", "telegram", "allowFrom", "111", "222"]).0,
        Some(0)
    );
    assert_eq!(
        set(&[
            "--channel",
            "telegram",
            "--account",
            "default",
            "dmPolicy",
            "allowlist"
        ])
        .0,
        Some(0)
    );
    assert_eq!(
        set(&[
            "--channel",
            "telegram",
            "--group",
            "-100777",
            "requireMention",
            "false"
        ])
        .0,
        Some(0)
    );
    assert_eq!(
        set(&["--channel", "defaults", "historyLimit", "20"]).0,
        Some(0)
    );
    let written = file();
    assert!(written.contains("    # the one bot\n"), "{written}");
    assert!(
        written.contains("\n    allowFrom: [\"111\", \"222\"]\n"),
        "{written}"
    );
    assert!(
        written.contains("\n        dmPolicy: allowlist\n"),
        "{written}"
    );
    assert!(written.contains("requireMention: false"), "{written}");
    assert!(
        written.contains("\n  defaults:\n    historyLimit: 20\n"),
        "{written}"
    );
    let validate = deepcli()
        .args(["--config", config, "validate"])
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );

    // Refused: the would-be config is invalid (open to anyone without saying "*"), a value
    // the key does not take, a channel that is not there. The file is as it was.
    let (code, stderr) = set(&[
        "--channel",
        "telegram",
        "--account",
        "default",
        "dmPolicy",
        "open",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error[dm-open-without-wildcard]"),
        "{stderr}"
    );
    let (code, stderr) = set(&["--channel", "telegram", "groupPolicy", "opne"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("(did you mean `open`?)"), "{stderr}");
    let (code, stderr) = set(&["--channel", "telegrm", "dmPolicy", "open"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no channel `telegrm` (did you mean `telegram`?)"),
        "{stderr}"
    );
    assert_eq!(file(), written);

    // --unset: the account inherits the channel's again.
    assert_eq!(
        set(&[
            "--channel",
            "telegram",
            "--account",
            "default",
            "--unset",
            "dmPolicy"
        ])
        .0,
        Some(0)
    );
    assert!(!file().contains("dmPolicy"), "{}", file());
}

#[test]
fn agents_add_writes_the_runtime_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().to_str().unwrap();
    std::fs::write(
        dir.path().join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n",
    )
    .unwrap();
    let add = |args: &[&str]| {
        deepcli()
            .args(["--config", config, "agents", "add"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = add(&["Coder", "--runtime", "acp", "--", "codex-acp", "--flag"]);
    assert!(out.status.success(), "{out:?}");
    let agents = std::fs::read_to_string(dir.path().join("agents.yaml")).unwrap();
    assert!(
        agents.contains("runtime: {kind: acp, command: [codex-acp, \"--flag\"]}"),
        "{agents}"
    );
    for (args, says) in [
        (
            &["a", "--runtime", "process"][..],
            "a `process` runtime needs the command",
        ),
        (
            &["b", "--runtime", "none", "--", "x"][..],
            "a `none` runtime runs no command",
        ),
        (
            &["c", "--runtime", "docker", "--", "x"][..],
            "`docker` is not a runtime kind",
        ),
    ] {
        let out = add(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{out:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agents.yaml")).unwrap(),
        agents,
        "a refused add writes nothing"
    );
}
