//! A remote A2A agent (`runtime.kind: a2a`, docs/a2a.md "Connecting a remote A2A agent") on the
//! official A2A Python SDK's server (`a2a-sdk`, tests/peers/a2a_remote.py): a remote that
//! offers only the gRPC binding is spoken to over gRPC.

use std::process::Command;

use serde_json::Value;

use crate::common::{self, Up};

const REMOTE_TOKEN: &str = "remote-secret-token";

/// The scripted remote on the Python SDK's server, stopped when dropped; what it prints on
/// stderr (each call's method and tenant, each cancel) is in `log`.
struct PyRemote {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PyRemote {
    fn start(args: &[&str]) -> PyRemote {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let log = dir.path().join("stderr");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a_remote.py");
        let child = Command::new("python3")
            .arg(script)
            .arg(&port_file)
            .args(args)
            .env("A2A_REMOTE_TOKEN", REMOTE_TOKEN)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        common::wait_until("the Python remote listening", || {
            std::fs::read_to_string(&port_file).is_ok_and(|p| p.ends_with('\n'))
        });
        let port = std::fs::read_to_string(&port_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        PyRemote {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PyRemote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn up_with(remote: &PyRemote) -> Up {
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n",
        remote.url()
    );
    Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", REMOTE_TOKEN)
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    })
}

/// `deepcli sessions <args…> --json` against `up`.
fn sessions(up: &Up, args: &[&str]) -> Value {
    let out = up.deepcli(&[&["sessions"], args, &["--json"]].concat());
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn reply(said: &Value) -> String {
    said["reply"].as_str().unwrap_or_default().to_string()
}

/// A remote whose card offers only a gRPC interface at `runtime.url` (issue 38): the status
/// says GRPC; a message is a server-streamed `SendStreamingMessage` in the session's context
/// carrying the card's tenant and the token, a question asked back is answered in the same
/// task, and a cancel is `CancelTask`, confirmed by the remote.
#[test]
fn a_remote_offering_only_grpc_is_spoken_to_over_grpc() {
    let remote = PyRemote::start(&[]);
    let up = up_with(&remote);
    let ready = up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let card = &Up::runtime(&ready, "remote").unwrap()["info"]["card"];
    assert_eq!(card["protocolBinding"], "GRPC", "{ready:#}");
    assert_eq!(card["name"], "Python remote", "{ready:#}");

    let first = sessions(&up, &["send", "agent:remote:main", "hello remote"]);
    assert_eq!(
        reply(&first),
        "remote: hello remote (context turn 1)",
        "{first:#}"
    );
    let second = sessions(&up, &["send", "agent:remote:main", "and again"]);
    assert_eq!(
        reply(&second),
        "remote: and again (context turn 2)",
        "one context per session: {second:#}"
    );
    let log = remote.log();
    assert!(
        log.contains("call SendStreamingMessage tenant=py-tenant auth=ok"),
        "the card's tenant and the token on each call: {log}"
    );

    // Asked back: the next message answers that task.
    let asked = sessions(&up, &["send", "agent:remote:main", "ask"]);
    assert_eq!(reply(&asked), "which one?", "{asked:#}");
    let answered = sessions(&up, &["send", "agent:remote:main", "this one"]);
    assert_eq!(
        reply(&answered),
        "remote: this one (context turn 4, task continued)",
        "{answered:#}"
    );

    // Cancel reaches the remote as CancelTask over gRPC; it confirms, the run is cancelled.
    let started = sessions(
        &up,
        &["send", "agent:remote:main", "slow", "--timeout", "0"],
    );
    assert!(started["runId"].is_string(), "{started:#}");
    common::wait_until("the remote working on it", || {
        remote.log().contains("working slow")
    });
    let cancelled = sessions(&up, &["cancel", "agent:remote:main"]);
    assert!(
        cancelled.to_string().contains("\"cancelled\""),
        "{cancelled:#}"
    );
    let log = remote.log();
    assert!(
        log.contains("call CancelTask tenant=py-tenant auth=ok"),
        "the remote got no CancelTask: {log}"
    );
}

/// One deepcli is another's remote over gRPC: the hub's card (at the listener's root) names
/// its gRPC interface at the listener's URL and nothing else there, so `url: http://host:port`
/// is spoken to over gRPC with no tenant — the hub's endpoint, routed by its bindings.
#[test]
fn one_deepcli_is_anothers_remote_over_grpc() {
    const PEER_TOKEN: &str = "peer-token-0123456789";
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        common::sdk_echo_agent().display()
    );
    let channels = "a2a:\n  expose: [sdk]\n  peers:\n    other-hub:\n      token: {source: env, id: PEER_TOKEN}\n";
    let bindings = "bindings:\n  - agentId: sdk\n    match: {channel: a2a}\n";
    let hub = Up::start_config(&agents, channels, bindings, |c| {
        c.env("PEER_TOKEN", PEER_TOKEN);
    });
    hub.wait_for("the echo agent ready", |doc| {
        Up::runtime(doc, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"http://{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n",
        hub.addr
    );
    let up = Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", PEER_TOKEN)
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    });
    let ready = up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let card = &Up::runtime(&ready, "remote").unwrap()["info"]["card"];
    assert_eq!(card["protocolBinding"], "GRPC", "{ready:#}");
    assert_eq!(card["name"], "deepcli hub", "{ready:#}");

    let said = sessions(&up, &["send", "agent:remote:main", "hello over grpc"]);
    let text = reply(&said);
    assert!(
        text.starts_with("echo: ") && text.contains("hello over grpc"),
        "{said:#}"
    );
    // The other hub took it as a task of its peer, from the one context of this session.
    let tasks = common::count(
        &hub.state,
        "SELECT count(*) FROM a2a_tasks WHERE peer = 'other-hub'",
    );
    assert_eq!(tasks, 1);
}

/// A remote whose card says `capabilities.streaming: false` (issue 38): the message is a
/// `SendMessage` answered at once, and the run completes from the task's updates — pushed by
/// the remote to a webhook deepcli gave it when the card offers push notifications, else read
/// back with `GetTask` — a question asked back is answered in the same task, and a cancel is
/// confirmed the same way.
#[test]
fn a_remote_that_cannot_stream_is_followed_by_its_pushes_or_by_reading_its_task() {
    for mode in ["no-streaming", "push"] {
        let remote = PyRemote::start(&[mode]);
        let up = up_with(&remote);
        let ready = up.wait_for("the remote ready", |doc| {
            Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
        });
        let card = &Up::runtime(&ready, "remote").unwrap()["info"]["card"];
        assert_eq!(card["streaming"], false, "{mode}: {ready:#}");

        let first = sessions(&up, &["send", "agent:remote:main", "hello remote"]);
        assert_eq!(
            reply(&first),
            "remote: hello remote (context turn 1)",
            "{mode}: {first:#}"
        );
        let asked = sessions(&up, &["send", "agent:remote:main", "ask"]);
        assert_eq!(reply(&asked), "which one?", "{mode}: {asked:#}");
        let answered = sessions(&up, &["send", "agent:remote:main", "this one"]);
        assert_eq!(
            reply(&answered),
            "remote: this one (context turn 3, task continued)",
            "{mode}: {answered:#}"
        );

        let started = sessions(
            &up,
            &["send", "agent:remote:main", "slow", "--timeout", "0"],
        );
        assert!(started["runId"].is_string(), "{mode}: {started:#}");
        common::wait_until("the remote working on it", || {
            remote.log().contains("working slow")
        });
        let cancelled = sessions(&up, &["cancel", "agent:remote:main"]);
        assert!(
            cancelled.to_string().contains("\"cancelled\""),
            "{mode}: {cancelled:#}"
        );

        let log = remote.log();
        assert!(
            log.contains("call SendMessage tenant=py-tenant auth=ok")
                && !log.contains("call SendStreamingMessage"),
            "{mode}: {log}"
        );
        if mode == "push" {
            // Every update came by the webhook: the task was never read back (a read is
            // only a fallback, 5 s after the send).
            assert!(
                log.contains("pushed to http://127.0.0.1:") && !log.contains("call GetTask"),
                "{mode}: {log}"
            );
        } else {
            assert!(
                log.contains("call GetTask tenant=py-tenant auth=ok") && !log.contains("pushed"),
                "{mode}: {log}"
            );
        }
    }
}
