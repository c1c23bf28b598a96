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
    /// `https` when it serves over TLS.
    scheme: &'static str,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PyRemote {
    fn start(args: &[&str]) -> PyRemote {
        PyRemote::start_with(args, &[])
    }

    fn start_with(args: &[&str], env: &[(&str, &std::path::Path)]) -> PyRemote {
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
            .envs(env.iter().copied())
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
        let tls = env.iter().any(|(k, _)| *k == "A2A_REMOTE_TLS_CERT");
        PyRemote {
            child,
            port,
            scheme: if tls { "https" } else { "http" },
            log,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
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
    up_trusting(remote, None)
}

/// [`up_with`], the controller trusting only the CA at `ca` when given (`SSL_CERT_FILE`: the
/// platform's roots, as rustls reads them on Linux).
fn up_trusting(remote: &PyRemote, ca: Option<&std::path::Path>) -> Up {
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n",
        remote.url()
    );
    Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", REMOTE_TOKEN)
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
        if let Some(ca) = ca {
            c.env("SSL_CERT_FILE", ca);
        }
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

/// Behind a proxy or on all addresses (`--listen 0.0.0.0:…`) the listener's own address is no
/// webhook a remote can use; with `--public-url` the webhook is given under that URL, and the
/// remote's pushes come back through it.
#[test]
fn a_remote_is_given_its_webhook_under_the_public_url() {
    let remote = PyRemote::start(&["push"]);
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n",
        remote.url()
    );
    let up = Up::start_config(&agents, "", "bindings: []\n", |c| {
        c.args(["--listen", &format!("0.0.0.0:{port}")])
            .env("DEEPCLI_PUBLIC_URL", format!("http://localhost:{port}/"))
            .env("REMOTE_TOKEN", REMOTE_TOKEN)
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    });
    up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let said = sessions(&up, &["send", "agent:remote:main", "hello remote"]);
    assert_eq!(
        reply(&said),
        "remote: hello remote (context turn 1)",
        "{said:#}"
    );
    let log = remote.log();
    assert!(
        log.contains(&format!(
            "pushed to http://localhost:{port}/a2a-remote-push/"
        )) && !log.contains("call GetTask"),
        "{log}"
    );
}

/// A CA and a certificate it signed for 127.0.0.1, made with `openssl` in `dir`: the CA's
/// certificate, the server's certificate and key.
fn certificates(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"],
        &ec[..],
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=deepcli test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    ]
    .concat());
    run(&[
        &["req"],
        &ec[..],
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
    ["ca.pem", "server.pem", "server.key"].map(|f| dir.join(f))
}

/// A remote whose gRPC interface is at an `https` URL is spoken to over TLS (ALPN `h2`), its
/// certificate checked against the platform's roots: trusted, it answers; signed by a CA the
/// controller does not trust, the runtime fails and says why.
#[test]
fn a_remote_offering_grpc_over_tls_is_spoken_to_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, cert, key] = certificates(dir.path());
    let remote = PyRemote::start_with(
        &[],
        &[("A2A_REMOTE_TLS_CERT", &cert), ("A2A_REMOTE_TLS_KEY", &key)],
    );
    assert!(remote.url().starts_with("https://"));

    let up = up_trusting(&remote, Some(&ca));
    let ready = up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let card = &Up::runtime(&ready, "remote").unwrap()["info"]["card"];
    assert_eq!(card["protocolBinding"], "GRPC", "{ready:#}");
    let said = sessions(&up, &["send", "agent:remote:main", "hello over tls"]);
    assert_eq!(
        reply(&said),
        "remote: hello over tls (context turn 1)",
        "{said:#}"
    );
    assert!(
        remote
            .log()
            .contains("call SendStreamingMessage tenant=py-tenant auth=ok"),
        "{}",
        remote.log()
    );
    drop(up);

    let untrusting = up_trusting(&remote, None);
    let failed = untrusting.wait_for("the remote failed", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "failed")
    });
    let error = Up::runtime(&failed, "remote").unwrap()["lastError"].to_string();
    assert!(error.to_lowercase().contains("certificate"), "{error}");
}

/// A file an A2A peer sends to a remote agent (exposed over A2A itself) goes on to the remote
/// as a file part with the same bytes.
#[test]
fn a_peers_file_goes_on_to_a_remote_agent_as_a_file_part() {
    use base64::Engine as _;
    let remote = PyRemote::start(&[]);
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: remote\n      runtime: {{kind: a2a, url: \"{}\", token: {{source: env, id: REMOTE_TOKEN}}}}\n",
        remote.url()
    );
    let channels = "a2a:\n  expose: [remote]\n  peers:\n    partner:\n      token: {source: env, id: PARTNER_TOKEN}\n";
    let up = Up::start_config(&agents, channels, "bindings: []\n", |c| {
        c.env("REMOTE_TOKEN", REMOTE_TOKEN)
            .env("PARTNER_TOKEN", "partner-token-0123456789")
            .env("DEEPCLI_FAILPOINT_RUNTIME_MS", "a2a_card_every=200");
    });
    up.wait_for("the remote ready", |doc| {
        Up::runtime(doc, "remote").is_some_and(|r| r["status"] == "ready")
    });
    let bytes = b"a file for afar\n";
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [
            {"text": "take this"},
            {"raw": base64::engine::general_purpose::STANDARD.encode(bytes), "filename": "far.txt", "mediaType": "text/plain"},
        ]},
    }});
    let answer = common::http(
        up.addr,
        "POST",
        "/a2a/remote/",
        &[
            ("authorization", "Bearer partner-token-0123456789"),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    let task = &answer.body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{:#}",
        answer.body
    );
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
    let log = remote.log();
    assert!(
        log.contains(&format!("file far.txt text/plain {} {sha}", bytes.len())),
        "{log}"
    );
}
