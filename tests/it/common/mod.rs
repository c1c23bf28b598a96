//! The harness of the controller tests: `deepcli up` as a child process on a temp config, its
//! status, and the ACP peers `scripts/test` installs.
#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Up {
    pub child: Child,
    pub _tmp: tempfile::TempDir,
    pub config: PathBuf,
    pub state: PathBuf,
    /// The state's database in PostgreSQL (`--state-url`), when not in `state`.
    pub postgres: Option<PgSchema>,
    /// Where its HTTP API listens.
    pub addr: std::net::SocketAddr,
}

/// A schema of its own in this machine's PostgreSQL (`DEEPCLI_TEST_POSTGRES`, by default
/// `postgres://postgres@127.0.0.1:5432/test`), dropped after the test; read with `psql`.
pub struct PgSchema {
    base: String,
    name: String,
}

impl PgSchema {
    pub fn new() -> PgSchema {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let base = std::env::var("DEEPCLI_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("deepcli_it_{}_{n}", std::process::id());
        let schema = PgSchema { base, name };
        schema.psql(&format!(
            "DROP SCHEMA IF EXISTS {0} CASCADE; CREATE SCHEMA {0}",
            schema.name
        ));
        schema
    }

    /// The state URL whose sessions use this schema.
    pub fn url(&self) -> String {
        let join = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{join}options=-c%20search_path%3D{}",
            self.base, self.name
        )
    }

    /// What `sql` prints in this schema, `psql -tA`: `None` when it failed.
    pub fn query(&self, sql: &str) -> Option<String> {
        let out = Command::new("psql")
            .args([self.url().as_str(), "-v", "ON_ERROR_STOP=1", "-tAc", sql])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn psql(&self, sql: &str) {
        let out = Command::new("psql")
            .args([self.base.as_str(), "-v", "ON_ERROR_STOP=1", "-qc", sql])
            .output()
            .expect("psql runs (.ci/run installs PostgreSQL)");
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        self.psql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// A loopback address nothing listens on (a port bound and let go): for a peer that must be
/// unreachable, never for a server to listen on.
pub fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Where the controller `pid` on `state` listens: it binds port 0 and records the address it
/// got, with its pid, in the state (a restarted controller's address is not the last one's).
pub fn listening(state: &Path, pid: u32) -> std::net::SocketAddr {
    listening_at(state, None, pid)
}

/// [`listening`], the state's database in PostgreSQL when `postgres` is given.
pub fn listening_at(state: &Path, postgres: Option<&PgSchema>, pid: u32) -> std::net::SocketAddr {
    let read = || {
        let meta = |key: &str| -> Option<String> {
            if let Some(schema) = postgres {
                return schema
                    .query(&format!("SELECT value FROM meta WHERE key = '{key}'"))
                    .filter(|v| !v.is_empty());
            }
            let db = rusqlite::Connection::open_with_flags(
                state.join("state.db"),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .ok()?;
            db.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| {
                r.get::<_, String>(0)
            })
            .ok()
        };
        (meta("controller_pid")? == pid.to_string())
            .then(|| meta("controller_addr")?.parse().ok())
            .flatten()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(addr) = read() {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "controller {pid} recorded no address"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a child's piped stderr until a log line names the address it listens on
/// (`addr=HOST:PORT`); the lines after it arrive on the receiver (drained on a thread, so the
/// child never blocks on a full pipe).
pub fn listening_in_log(
    child: &mut Child,
) -> (std::net::SocketAddr, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr piped");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server logged no address before it ended")
            .unwrap();
        if let Some(at) = line.find("addr=") {
            let text = line[at + 5..].split_whitespace().next().unwrap_or("");
            break text.trim_matches('"').parse().unwrap();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (addr, rx)
}

pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("deepcli")
}

/// `deepcli up` on port 0 of loopback ([`listening`] tells where it went).
pub fn controller(
    home: &Path,
    config: &Path,
    state: &Path,
    configure: impl FnOnce(&mut Command),
) -> Child {
    // Only a failpoints build honours the closed platform port below: without it, a Telegram
    // or Slack account in a test's config would reach the real platform.
    if !cfg!(feature = "failpoints") {
        panic!(
            "the integration tests run `deepcli up` and need `--features failpoints` (no test \
             may reach a real platform): run scripts/test"
        );
    }
    let mut cmd = Command::new(bin());
    cmd.args([
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ])
    .args(["up", "--listen", "127.0.0.1:0", "--debounce-ms", "100"])
    .env("HOME", home)
    .env("NO_COLOR", "1")
    // No test reaches a real platform: an account without an `apiBase` gets a closed port.
    .env("DEEPCLI_FAILPOINT_PLATFORM_API", "http://127.0.0.1:9")
    .env_remove("RUST_LOG")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    configure(&mut cmd);
    cmd.spawn().unwrap()
}

/// `agents` (an agents.yaml starting `agents:\n`) with every runtime unsandboxed: for the
/// tests of the supervision of plain processes (their process groups, escapees and leftovers
/// after a killed controller), which watch pids and files on the host. A sandboxed runtime's
/// processes live in its own PID namespace and die with it (tests/it/isolation.rs).
pub fn unsandboxed(agents: &str) -> String {
    agents.replacen(
        "agents:\n",
        "agents:\n  defaults:\n    sandbox: {mode: off}\n",
        1,
    )
}

/// agents.yaml with `main` and `sdk`, an acp runtime running the echo agent written on the ACP
/// TypeScript SDK (`tests/peers/sdk-echo-agent.mjs`).
/// A count of the state's rows: `sql` is a `SELECT count(*) …` (-1 when it cannot be read).
pub fn count(state: &Path, sql: &str) -> i64 {
    let Ok(db) = rusqlite::Connection::open(state.join("state.db")) else {
        return -1;
    };
    db.query_row(sql, [], |r| r.get(0)).unwrap_or(-1)
}

pub fn sdk_agents() -> String {
    format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        sdk_echo_agent().display()
    )
}

/// The echo agent on the ACP TypeScript SDK, once the SDK it imports is installed in
/// `.npm-peers/` and `node` runs: a missing peer fails here, at once, and not as a runtime that
/// never gets ready.
pub fn sdk_echo_agent() -> PathBuf {
    node();
    npm_peer("@agentclientprotocol/sdk");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // scripts/test links it; a `cargo test` run alone may not have.
    let link = root.join("tests/peers/node_modules");
    if std::fs::symlink_metadata(&link).is_err() {
        let _ = std::os::unix::fs::symlink("../../.npm-peers/node_modules", &link);
    }
    root.join("tests/peers/sdk-echo-agent.mjs")
}

/// codex-acp's command in `.npm-peers/`, once it and the binary package it runs for this
/// platform are installed and `node` runs.
pub fn codex_acp() -> PathBuf {
    node();
    let package = npm_peer("@zed-industries/codex-acp");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(package.join("package.json")).unwrap())
            .unwrap();
    // The launcher runs `@zed-industries/codex-acp-<platform>-<arch>`, an optional dependency
    // that npm installs for this machine only.
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        os => os,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        arch => arch,
    };
    let binary = format!("@zed-industries/codex-acp-{os}-{arch}");
    let Some(want) = manifest["optionalDependencies"][&binary].as_str() else {
        panic!("codex-acp has no binary package for this machine (`{binary}`)");
    };
    let installed = installed_version(&binary);
    assert!(
        installed.as_deref() == Some(want),
        "`{binary}` {want}, the codex-acp binary for this machine, is not installed in \
         .npm-peers/ (found {}): {PEERS_HINT}",
        installed.as_deref().unwrap_or("nothing")
    );
    let command =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".npm-peers/node_modules/.bin/codex-acp");
    assert!(
        command.exists(),
        "`{}` is missing: {PEERS_HINT}",
        command.display()
    );
    command
}

const PEERS_HINT: &str = "run the tests with scripts/test, which installs the ACP test peers \
     (tests/peers/package-lock.json) into .npm-peers/";

/// The directory of an npm package of `.npm-peers/`, checked to be installed at the version
/// `tests/peers/package.json` pins.
pub fn npm_peer(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pins: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/peers/package.json")).unwrap(),
    )
    .unwrap();
    let pinned = pins["dependencies"][name]
        .as_str()
        .or_else(|| pins["optionalDependencies"][name].as_str());
    let Some(pinned) = pinned else {
        panic!("`{name}` is not an ACP test peer: tests/peers/package.json does not pin it");
    };
    match installed_version(name) {
        Some(version) if version == pinned => root.join(".npm-peers/node_modules").join(name),
        Some(version) => panic!(
            "`{name}` {version} is installed in .npm-peers/, but tests/peers/package.json pins \
             {pinned}: {PEERS_HINT}"
        ),
        None => panic!("`{name}` {pinned} is not installed in .npm-peers/: {PEERS_HINT}"),
    }
}

/// The version in `.npm-peers/node_modules/<name>/package.json`, if there is one.
fn installed_version(name: &str) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = root
        .join(".npm-peers/node_modules")
        .join(name)
        .join("package.json");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(manifest).ok()?).ok()?;
    manifest["version"].as_str().map(str::to_string)
}

/// `node` runs (the ACP peers are node programs).
fn node() {
    let version = Command::new("node").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|out| out.status.success()),
        "`node --version` failed ({version:?}): the ACP test peers need node 20 or later on PATH"
    );
}

impl Up {
    pub fn start(agents: &str, bindings: &str) -> Up {
        Up::start_with(agents, bindings, |_| {})
    }

    /// Writes the config and starts `deepcli up` on it; `configure` adds to the command.
    pub fn start_with(agents: &str, bindings: &str, configure: impl FnOnce(&mut Command)) -> Up {
        // The inbound policy opened wide: these are tests of the controller, not of the policy.
        // The account is a bridge's: the tests sign envelopes themselves.
        let channels = "channels:\n  defaults: {dmPolicy: open, allowFrom: [\"*\"], groupPolicy: open, requireMention: false}\n  slack:\n    accounts:\n      default: {botToken: {source: env, id: SLACK_TOKEN}, mode: bridge}\n";
        Up::start_config(agents, channels, bindings, configure)
    }

    /// Starts `deepcli up` on the three files.
    pub fn start_config(
        agents: &str,
        channels: &str,
        bindings: &str,
        configure: impl FnOnce(&mut Command),
    ) -> Up {
        Up::start_files(
            &[
                ("agents.yaml", agents),
                ("channels.yaml", channels),
                ("bindings.yaml", bindings),
            ],
            configure,
        )
    }

    /// Starts `deepcli up` on a config directory holding `files`.
    pub fn start_files(files: &[(&str, &str)], configure: impl FnOnce(&mut Command)) -> Up {
        Up::start_on(files, None, configure)
    }

    /// Starts `deepcli up` on a config directory holding `files`, the state's database in
    /// `postgres` when given (`--state-url`).
    pub fn start_on(
        files: &[(&str, &str)],
        postgres: Option<PgSchema>,
        configure: impl FnOnce(&mut Command),
    ) -> Up {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&config).unwrap();
        for (name, text) in files {
            std::fs::write(config.join(name), text).unwrap();
        }
        let child = controller(tmp.path(), &config, &state, |cmd| {
            if let Some(schema) = &postgres {
                cmd.env("DEEPCLI_STATE_URL", schema.url());
            }
            configure(cmd);
        });
        let addr = listening_at(&state, postgres.as_ref(), child.id());
        Up {
            child,
            _tmp: tmp,
            config,
            state,
            postgres,
            addr,
        }
    }

    /// A new controller on the same directories (after the last one died).
    pub fn restart(&mut self, configure: impl FnOnce(&mut Command)) {
        let home = self._tmp.path().to_path_buf();
        let url = self.postgres.as_ref().map(PgSchema::url);
        self.child = controller(&home, &self.config, &self.state, |cmd| {
            if let Some(url) = url {
                cmd.env("DEEPCLI_STATE_URL", url);
            }
            configure(cmd);
        });
        self.addr = listening_at(&self.state, self.postgres.as_ref(), self.child.id());
    }

    /// A `deepcli` command on this controller's state: `--state-dir`, and its
    /// `DEEPCLI_STATE_URL` when the database is in PostgreSQL.
    fn command(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(["--state-dir", self.state.to_str().unwrap()]);
        match &self.postgres {
            Some(schema) => cmd.env("DEEPCLI_STATE_URL", schema.url()),
            None => cmd.env_remove("DEEPCLI_STATE_URL"),
        };
        cmd
    }

    /// `deepcli status --json`, whichever source answered.
    fn status_json(&self) -> Option<Value> {
        let out = self.command().args(["status", "--json"]).output().ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The status from the state database (no controller running).
    pub fn recorded(&self) -> Value {
        let doc = self.status_json().unwrap_or_default();
        assert_eq!(doc["source"], "state", "{doc:#}");
        doc
    }

    /// The running controller's status.
    pub fn status(&self) -> Option<Value> {
        let doc = self.status_json()?;
        (doc["source"] == "controller").then_some(doc)
    }

    /// Polls the status until `check` holds (30 s at most).
    pub fn wait_for(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some(doc) = self.status() {
                if check(&doc) {
                    return doc;
                }
                last = doc;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}; last status:\n{last:#}");
    }

    pub fn runtime<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
        doc["runtimes"]
            .as_array()?
            .iter()
            .find(|r| r["agentId"] == id)
    }

    /// Runs `deepcli <args…>` on this controller's config and state directory (no colour, no
    /// operator token from the environment).
    pub fn deepcli(&self, args: &[&str]) -> std::process::Output {
        self.command()
            .args(["--config", self.config.to_str().unwrap()])
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("DEEPCLI_OPERATOR_TOKEN")
            .output()
            .unwrap()
    }

    pub fn write_by_rename(&self, name: &str, text: &str) {
        let tmp = self.config.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.config.join(name)).unwrap();
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the controller did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

pub fn pid_of(doc: &Value, id: &str) -> u64 {
    Up::runtime(doc, id).unwrap()["pid"].as_u64().unwrap()
}

/// One process, named by its pid and start time (`/proc/<pid>/stat` field 22), so a pid reused
/// by another process is not mistaken for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u64,
    pub start: String,
}

/// `/proc/<pid>/stat` after the command name: state, ppid, pgrp, session, …
fn stat_fields(pid: u64) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

impl Proc {
    /// The running process `pid` (panics when there is none: the test expected one).
    pub fn running(pid: u64) -> Proc {
        let fields = stat_fields(pid).unwrap_or_else(|| panic!("no process {pid}"));
        assert_ne!(fields[0], "Z", "process {pid} is a zombie already");
        Proc {
            pid,
            start: fields[19].clone(),
        }
    }

    /// Gone: no such pid, a zombie (dead, not yet reaped), or the pid of another process now.
    pub fn gone(&self) -> bool {
        match stat_fields(self.pid) {
            None => true,
            Some(fields) => fields[0] == "Z" || fields[19] != self.start,
        }
    }
}

/// The pids a runtime's script wrote, one per line (an incomplete last line is left out).
pub fn pids_in(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills what a test's runtimes may have left behind when the test fails: every `sleep` whose
/// pid is in one of `files` (read when dropped, so declare it after the temp dir).
#[derive(Default)]
pub struct Leftovers(pub Vec<PathBuf>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in self.0.iter().flat_map(|f| pids_in(f)) {
            let sleeping = std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"sleep\0"));
            if sleeping {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// A runtime's row in the state database, as the controller recorded it (`status`, `pid`).
pub fn recorded_runtime(state: &Path, agent: &str) -> Option<(String, Option<i64>)> {
    let db = rusqlite::Connection::open_with_flags(
        state.join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    db.query_row(
        "SELECT status, pid FROM runtimes WHERE agent_id = ?1",
        [agent],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

/// The inbound policy opened wide (`channels.defaults`): for tests of delivery, not of the
/// policy (`policy.rs` tests that).
pub const OPEN_DOOR: &str =
    "  defaults: {dmPolicy: open, allowFrom: [\"*\"], groupPolicy: open, requireMention: false}\n";

/// `channels` (a channels.yaml text) with [`OPEN_DOOR`].
pub fn open(channels: &str) -> String {
    channels.replacen("channels:\n", &format!("channels:\n{OPEN_DOOR}"), 1)
}

/// An HTTP answer.
pub struct Answer {
    pub status: u16,
    /// The `x-deepcli-plan-generation` header, when there is one.
    pub generation: Option<u64>,
    /// The `server-timing` header, when there is one.
    pub server_timing: Option<String>,
    /// The `etag` header, when there is one.
    pub etag: Option<String>,
    /// JSON when it parses, else the text.
    pub body: Value,
}

/// One HTTP call to `addr`: GET, or any other method as a POST of `body`.
pub fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let url = format!("http://{addr}{path}");
    let response = if method == "GET" {
        let mut req = agent.get(&url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.call()
    } else {
        let mut req = agent.post(&url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send(body)
    }
    .unwrap();
    let status = response.status().as_u16();
    let generation = response
        .headers()
        .get("x-deepcli-plan-generation")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let server_timing = response
        .headers()
        .get("server-timing")
        .and_then(|v| Some(v.to_str().ok()?.to_string()));
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| Some(v.to_str().ok()?.to_string()));
    let text = response.into_body().read_to_string().unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        generation,
        server_timing,
        etag,
        body,
    }
}

/// `POST /v1/inbound` of `envelope`, signed with `secret`: status and body.
pub fn signed_inbound(addr: std::net::SocketAddr, secret: &[u8], envelope: &Value) -> (u16, Value) {
    let body = envelope.to_string();
    let signature = deepcli::sign(secret, body.as_bytes());
    let answer = http(
        addr,
        "POST",
        "/v1/inbound",
        &[
            ("x-deepcli-signature", &signature),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    );
    (answer.status, answer.body)
}

/// (provenance, text) of a session key's transcript, in order.
pub fn transcript(state: &Path, session_key: &str) -> Vec<(String, String)> {
    let db = rusqlite::Connection::open(state.join("state.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT provenance, text FROM transcript WHERE session_key = ?1 ORDER BY id")
        .unwrap();
    stmt.query_map([session_key], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Receives one HTTP request on a loopback port: (headers in lower case, body).
pub fn one_request() -> (String, std::sync::mpsc::Receiver<(String, String)>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/replies", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut headers = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            let lower = line.to_lowercase();
            if let Some(n) = lower.strip_prefix("content-length:") {
                length = n.trim().parse().unwrap();
            }
            headers.push_str(&lower);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .unwrap();
        tx.send((headers, String::from_utf8(body).unwrap()))
            .unwrap();
    });
    (url, rx)
}
