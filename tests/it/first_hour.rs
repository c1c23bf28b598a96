//! A newcomer's first hour (shared/reviews/first-hour.md, "What a newcomer would want next"):
//! `deepcli init` writes a hub that validates clean, checks offline in an editor and answers on
//! the command line once `deepcli up` runs; `deepcli doctor` says what the hub still needs from
//! the machine — secrets, programs, the address, the platforms — keeping a network that does
//! not reach a platform apart from credentials the platform refuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::adapters::telegram_fake::{BOT_ID, BOT_NAME, Server, TOKEN};
use crate::common::{Up, bin, free_addr, listening};

/// What no test output may hold: a secret's value, set in the environment doctor runs in.
const SET_SECRET: &str = "sk-doctor-SET-value-7f3a9c";
/// A variable no test environment sets.
const UNSET: &str = "DEEPCLI_DOCTOR_UNSET_TOKEN";

/// `deepcli ARGS` in `cwd`, with no colour, HOME in the temp dir and every platform account
/// without an `apiBase` on a closed port.
fn deepcli(cwd: &Path, args: &[&str]) -> Output {
    deepcli_env(cwd, args, &[])
}

fn deepcli_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.current_dir(cwd)
        .args(args)
        .env("NO_COLOR", "1")
        .env("HOME", cwd)
        .env("DEEPCLI_FAILPOINT_PLATFORM_API", "http://127.0.0.1:9")
        .env_remove("DEEPCLI_CONFIG")
        .env_remove("DEEPCLI_STATE_DIR")
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .env_remove(UNSET)
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy");
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The paths of a temp dir and the loopback ports, as snapshots show them.
fn filters(dir: &Path) -> Vec<(String, String)> {
    let escaped: String = dir
        .display()
        .to_string()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect();
    vec![
        (escaped, "[DIR]".into()),
        (r"127\.0\.0\.1:\d+".into(), "127.0.0.1:[PORT]".into()),
    ]
}

// ---- init --------------------------------------------------------------------------------------

/// A fresh `init`: the three files validate with no finding, each modeline names a schema
/// file init wrote beside it (the one `deepcli schema` prints: editors check offline), the
/// state directory it suggests is git-ignored, and doctor finds nothing to fix.
#[test]
fn init_writes_a_hub_that_validates_clean_with_schemas_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = deepcli(tmp.path(), &["init", "hub"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    insta::assert_snapshot!("init_output", text(&out.stdout));
    let hub = tmp.path().join("hub");

    let validate = deepcli(tmp.path(), &["validate", "--config", "hub"]);
    assert_eq!(
        (validate.status.code(), text(&validate.stdout).as_str()),
        (Some(0), "0 errors, 0 warnings in 3 files\n"),
        "{}",
        text(&validate.stderr)
    );
    let strict = deepcli(tmp.path(), &["validate", "--strict", "--config", "hub"]);
    assert_eq!(strict.status.code(), Some(0));

    for kind in ["agents", "channels", "bindings"] {
        let yaml = std::fs::read_to_string(hub.join(format!("{kind}.yaml"))).unwrap();
        let first = yaml.lines().next().unwrap();
        let schema = first
            .strip_prefix("# yaml-language-server: $schema=")
            .unwrap_or_else(|| panic!("{kind}.yaml starts without a modeline: {first}"));
        assert!(
            !schema.contains("://"),
            "{kind}.yaml's schema is not a local file: {schema}"
        );
        // yaml-language-server resolves a relative path against the file's directory.
        let path = hub.join(schema);
        let written = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{kind}.yaml's modeline names {}: {e}", path.display()));
        let printed = deepcli(tmp.path(), &["schema", kind]);
        assert_eq!(written, text(&printed.stdout), "{kind}");
        serde_json::from_str::<Value>(&written).unwrap();
    }

    let ignore = std::fs::read_to_string(hub.join(".gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "/.deepcli-state/"), "{ignore}");

    let listen = free_addr().to_string();
    let doctor = deepcli(
        tmp.path(),
        &[
            "--config",
            "hub",
            "--state-dir",
            "hub/.deepcli-state",
            "doctor",
            "--listen",
            &listen,
        ],
    );
    let said = text(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(0), "{said}");
    assert!(
        said.ends_with("0 failures, 0 warnings, 6 checks ok\n"),
        "{said}"
    );
    // Nothing was made but the files: no state directory before `up`.
    assert!(!hub.join(".deepcli-state").exists());
}

/// `init` over a config file refuses, names the files and `--force`, and writes nothing;
/// `--force` replaces them and adds to a `.gitignore` without losing what it held.
#[test]
fn init_refuses_to_replace_config_files_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("bindings.yaml"), "bindings: []\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "target/").unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();

    let out = deepcli(dir, &["init"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: bindings.yaml is already in .; nothing was written\nhint: `deepcli init --force .` replaces them; or init another directory\n"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(listing(), before, "a refused init wrote something");
    assert_eq!(
        std::fs::read_to_string(dir.join("bindings.yaml")).unwrap(),
        "bindings: []\n"
    );

    let out = deepcli(dir, &["init", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("replaced bindings.yaml"), "{said}");
    assert!(said.contains("added to .gitignore"), "{said}");
    assert!(
        said.contains("deepcli --config . --state-dir .deepcli-state up"),
        "{said}"
    );
    let bindings = std::fs::read_to_string(dir.join("bindings.yaml")).unwrap();
    assert!(bindings.contains("match: {channel: cli}"), "{bindings}");
    let ignore = std::fs::read_to_string(dir.join(".gitignore")).unwrap();
    assert!(
        ignore.starts_with("target/\n") && ignore.ends_with("/.deepcli-state/\n"),
        "{ignore}"
    );

    // Again: all three are there now. `--quiet` says nothing of what it wrote.
    let out = deepcli(dir, &["init", "."]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with(
            "error: agents.yaml, channels.yaml, bindings.yaml are already in .; nothing was written"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = deepcli(dir, &["--quiet", "init", "--force"]);
    assert_eq!((out.status.code(), out.stdout.len()), (Some(0), 0));
    // The line is not added twice.
    let again = std::fs::read_to_string(dir.join(".gitignore")).unwrap();
    assert_eq!(again, ignore);
}

/// The two commands `init` prints, run as printed (the controller on a free port): main's demo
/// agent comes up and answers the command line; doctor, while it runs, finds the address taken
/// by this very controller, which is no failure.
#[test]
fn an_initialised_hub_answers_on_the_command_line() {
    // As the harness's `controller`: only a failpoints build keeps `up` off real platforms.
    if !cfg!(feature = "failpoints") {
        panic!(
            "needs --features failpoints (scripts/test sets it): no test may reach a real platform"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = deepcli(tmp.path(), &["init", "hub"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let printed = |starts: &str| -> String {
        said.lines()
            .map(str::trim)
            .find(|l| l.starts_with("deepcli ") && l.contains(starts))
            .unwrap_or_else(|| panic!("init printed no `{starts}` command:\n{said}"))
            .to_string()
    };
    let up_line = printed(" up");
    let send_line = printed(" inbound send ");
    assert_eq!(
        up_line,
        "deepcli --config hub --state-dir hub/.deepcli-state up"
    );
    // `deepcli` on PATH is the binary under test.
    let path = format!(
        "{}:{}",
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let root = tmp.path().to_path_buf();
    let shell = |line: &str| {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", line])
            .current_dir(&root)
            .env("PATH", &path)
            .env("HOME", &root)
            .env("NO_COLOR", "1")
            .env("DEEPCLI_FAILPOINT_PLATFORM_API", "http://127.0.0.1:9")
            .env_remove("DEEPCLI_CONFIG")
            .env_remove("DEEPCLI_STATE_DIR")
            .env_remove("DEEPCLI_OPERATOR_TOKEN")
            .env_remove("RUST_LOG");
        cmd
    };
    // On a free port: 7430 may be another controller's on this machine.
    let child = shell(&format!(
        "exec {up_line} --listen 127.0.0.1:0 --debounce-ms 100"
    ))
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let hub = tmp.path().join("hub");
    let state = hub.join(".deepcli-state");
    let addr = listening(&state, child.id());
    let up = Up {
        child,
        _tmp: tmp,
        config: hub,
        state,
        postgres: None,
        addr,
    };
    up.wait_for("main ready", |s| {
        Up::runtime(s, "main").is_some_and(|r| r["status"] == "ready")
    });
    let out = shell(&send_line).output().unwrap();
    let reply = text(&out.stdout);
    assert!(
        out.status.success() && reply.contains("agent main") && reply.ends_with("echo: hello\n"),
        "{reply}{}",
        text(&out.stderr)
    );

    let doctor = up.deepcli(&["doctor", "--listen", &up.addr.to_string()]);
    let said = text(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "ok    listen       {}: taken by the deepcli controller running on this state directory (pid {})",
            up.addr,
            up.child.id()
        )),
        "{said}"
    );
}

/// `init` reads neither global directory flag (its DIR is the config directory), so its help
/// hides them; `doctor` reads both.
#[test]
fn init_and_doctor_show_the_global_flags_they_read() {
    let tmp = tempfile::tempdir().unwrap();
    let help = |command: &str| text(&deepcli(tmp.path(), &[command, "--help"]).stdout);
    let init = help("init");
    assert!(
        !init.contains("--config") && !init.contains("--state-dir") && init.contains("--quiet"),
        "{init}"
    );
    let doctor = help("doctor");
    assert!(
        doctor.contains("--config") && doctor.contains("--state-dir"),
        "{doctor}"
    );
    assert!(doctor.contains("Exit codes:"), "{doctor}");
}

// ---- doctor ------------------------------------------------------------------------------------

/// A config directory in a temp dir, with a state directory beside it that does not exist.
struct Hub {
    tmp: tempfile::TempDir,
}

impl Hub {
    fn new(agents: &str, channels: &str) -> Hub {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("agents.yaml"), agents).unwrap();
        std::fs::write(config.join("channels.yaml"), channels).unwrap();
        Hub { tmp }
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    fn config(&self) -> PathBuf {
        self.dir().join("config")
    }

    /// `deepcli doctor ARGS` on a free address, with `env` set.
    fn doctor(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let listen = free_addr().to_string();
        let config = self.config();
        let state = self.dir().join("state");
        let mut all = vec![
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "doctor",
            "--listen",
            &listen,
        ];
        all.extend_from_slice(args);
        deepcli_env(self.dir(), &all, env)
    }
}

/// `main` runs the demo agent, unsandboxed (what a sandbox needs from the host is not what
/// these tests are about, and the snapshot is the same on every host).
const MAIN: &str = "agents:\n  defaults:\n    sandbox: {mode: off}\n  list:\n    - id: main\n      default: true\n      runtime:\n        kind: acp\n        command: [deepcli, demo-agent]\n";

/// A Telegram account at `base` whose bot token is `token`.
fn telegram(base: &str, token: &str) -> String {
    format!(
        "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: {token}\n        apiBase: \"{base}\"\n"
    )
}

/// An unset variable fails its line, named, and is listed to export; a set one is `set`, and
/// its value shows nowhere, in text or JSON.
#[test]
fn doctor_fails_on_an_unset_secret_naming_the_variable_and_never_prints_a_set_one() {
    let closed = free_addr();
    let agents = format!(
        "{MAIN}        env:\n          OPENAI_API_KEY: {{source: env, id: DEEPCLI_DOCTOR_SET}}\n"
    );
    let channels = telegram(
        &format!("http://{closed}"),
        &format!("{{source: env, id: {UNSET}}}"),
    );
    let hub = Hub::new(&agents, &channels);
    let env = [("DEEPCLI_DOCTOR_SET", SET_SECRET)];
    let out = hub.doctor(&[], &env);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}{}", text(&out.stderr));
    assert!(
        said.contains(&format!(
            "fail  secret       channels.telegram.accounts.default.botToken: env {UNSET} is not set\n"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("Export before `deepcli up`: {UNSET}\n")),
        "{said}"
    );
    assert!(
        said.contains(
            "ok    secret       agents.main.runtime.env.OPENAI_API_KEY: env DEEPCLI_DOCTOR_SET is set\n"
        ),
        "{said}"
    );
    let filters = filters(hub.dir());
    let filters: Vec<(&str, &str)> = filters
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    insta::with_settings!({filters => filters}, {
        insta::assert_snapshot!("doctor_unset_secret", said);
    });

    let json = hub.doctor(&["--json"], &env);
    assert_eq!(json.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["status"], "fail");
    assert_eq!(doc["export"], serde_json::json!([UNSET]));
    let secret = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["subject"] == "channels.telegram.accounts.default.botToken")
        .unwrap();
    assert_eq!(
        (&secret["check"], &secret["status"], &secret["env"]),
        (&"secret".into(), &"fail".into(), &UNSET.into()),
        "{doc:#}"
    );
    for output in [&out, &json] {
        for stream in [&output.stdout, &output.stderr] {
            assert!(
                !text(stream).contains(SET_SECRET),
                "a secret's value was printed:\n{}",
                text(stream)
            );
        }
    }
}

/// A runtime whose program is not on PATH fails, named, with what to do.
#[test]
fn doctor_fails_on_a_runtime_command_not_on_path() {
    let agents = format!(
        "{MAIN}    - id: research\n      runtime: {{kind: acp, command: [deepcli-doctor-no-such-agent, --acp]}}\n    - id: local\n      runtime: {{kind: acp, command: [./bin/agent]}}\n"
    );
    let hub = Hub::new(&agents, "channels:\n  cli: {}\n");
    let out = hub.doctor(&[], &[]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "fail  runtime      research: `deepcli-doctor-no-such-agent` is not found on PATH\n                   fix: install `deepcli-doctor-no-such-agent`, or write its full path as the first word of agents.research.runtime.command"
        ),
        "{said}"
    );
    assert!(
        said.contains("ok    runtime      main: `deepcli demo-agent`: deepcli itself\n"),
        "{said}"
    );
    // A path is looked up from the runtime's working directory (its workspace).
    assert!(
        said.contains("fail  runtime      local: `") && said.contains("/bin/agent` does not exist"),
        "{said}"
    );
}

/// An account whose API host refuses the connection: the network is unreachable, and the
/// credentials are not said to be refused — by doctor, `channels login` and `channels status
/// --probe` alike.
#[test]
fn doctor_says_a_closed_port_is_unreachable_not_credentials_refused() {
    let closed = free_addr();
    let hub = Hub::new(
        MAIN,
        &telegram(
            &format!("http://{closed}"),
            "{source: env, id: DEEPCLI_DOCTOR_SET}",
        ),
    );
    let env = [("DEEPCLI_DOCTOR_SET", TOKEN)];
    let out = hub.doctor(&[], &env);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "fail  network      telegram/default: network unreachable: cannot connect to {closed}: connection refused\n"
        )),
        "{said}"
    );
    assert!(
        said.contains(
            "warn  credentials  telegram/default: not checked: the platform was not reached"
        ),
        "{said}"
    );
    assert!(!said.contains("credentials refused"), "{said}");

    let config = hub.config();
    let state = hub.dir().join("state");
    let dirs = [
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let login = deepcli_env(
        hub.dir(),
        &[&dirs[..], &["channels", "login", "--channel", "telegram"]].concat(),
        &env,
    );
    let error = text(&login.stderr);
    assert_eq!(login.status.code(), Some(1), "{error}");
    assert!(
        error.starts_with(&format!(
            "error: cannot reach {closed}: connection refused; the credentials were not checked\n"
        )),
        "{error}"
    );
    assert!(!error.contains("refused the credentials"), "{error}");

    let status = deepcli_env(
        hub.dir(),
        &[&dirs[..], &["channels", "status", "--probe", "--json"]].concat(),
        &env,
    );
    let doc: Value = serde_json::from_slice(&status.stdout).unwrap();
    let probe = &doc["accounts"][0]["probe"];
    assert_eq!(probe["result"], "unreachable", "{doc:#}");
    assert_eq!(
        probe["error"],
        format!("cannot reach {closed}: connection refused"),
        "{doc:#}"
    );
}

/// An account whose API answers 401: the network is fine and the credentials are refused;
/// with the right token, accepted, the bot named.
#[test]
fn doctor_says_credentials_refused_when_the_platform_answers_401() {
    let server = Server::start().unwrap();
    let hub = Hub::new(
        MAIN,
        &telegram(&server.base(), "{source: env, id: DEEPCLI_DOCTOR_SET}"),
    );
    let out = hub.doctor(&[], &[("DEEPCLI_DOCTOR_SET", "123456:WRONG-token")]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "ok    network      telegram/default: 127.0.0.1:{} answers (HTTP 404)\n",
            server.addr.port()
        )),
        "{said}"
    );
    assert!(
        said.contains("fail  credentials  telegram/default: credentials refused by the platform (getMe): the bot token was refused: Unauthorized\n"),
        "{said}"
    );
    assert!(!said.contains("WRONG-token"), "{said}");

    let out = hub.doctor(&[], &[("DEEPCLI_DOCTOR_SET", TOKEN)]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "ok    credentials  telegram/default: accepted (getMe): bot {BOT_ID} ({BOT_NAME})\n"
        )),
        "{said}"
    );
    assert!(!said.contains(TOKEN), "{said}");
    assert_eq!(server.fake.calls_of("getMe").len(), 2);
}

/// An address another process holds fails, with how to choose another; a config directory
/// that cannot be read is exit 2.
#[test]
fn doctor_fails_on_a_taken_address_and_cannot_run_without_a_config() {
    let hub = Hub::new(MAIN, "channels:\n  cli: {}\n");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let config = hub.config();
    let out = deepcli(
        hub.dir(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            "state",
            "doctor",
            "--listen",
            &addr,
        ],
    );
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "fail  listen       {addr}: taken by another process\n                   fix: stop what listens there"
        )),
        "{said}"
    );
    drop(held);

    let out = deepcli(hub.dir(), &["--config", "nowhere", "doctor"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("deepcli init DIR"));
    let empty = tempfile::tempdir().unwrap();
    let out = deepcli(
        hub.dir(),
        &[
            "--config",
            empty.path().to_str().unwrap(),
            "doctor",
            "--listen",
            &free_addr().to_string(),
        ],
    );
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("none of agents.yaml, channels.yaml, bindings.yaml is here"),
        "{said}"
    );
}

/// The default agent of a hub with a channel account, and an agent a binding names, without a
/// runtime: doctor warns that their messages are never answered (first-hour 4.1).
#[test]
fn doctor_warns_of_agents_that_get_messages_and_cannot_answer() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("channels.yaml"),
        "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: {source: env, id: TG_DOCTOR}\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n    - id: ops\n    - id: idle\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("bindings.yaml"),
        "bindings:\n  - agentId: ops\n    match: {channel: telegram, peer: {kind: group, id: \"-1\"}}\n",
    )
    .unwrap();
    let out = deepcli_env(
        tmp.path(),
        &["--state-dir", "st", "doctor", "--timeout", "200"],
        &[("TG_DOCTOR", "1:x")],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("warn  runtime      main: it is the default agent: messages no binding matches go to it, and it has no runtime: they are never answered"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "warn  runtime      ops: a binding routes messages to it, and it has no runtime"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("idle:"), "{stdout}");
}
