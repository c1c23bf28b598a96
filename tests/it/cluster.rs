//! Several `deepcli up` on one PostgreSQL state (docs/scale-out.md): real processes on
//! loopback, each a replica with a state directory of its own, sharing a schema of this
//! machine's PostgreSQL.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{PgSchema, controller, http, signed_inbound};

const SECRET: &str = "cluster-webhook-secret";
const TOKEN: &str = "cluster-token-for-the-tests-0123456789";
const BOT: &str = "7000000001";
const SENDER: &str = "111111111";
/// The A2A peer's token.
const PARTNER: &str = "partner-token-0123456789";
/// The claims' time in these tests: a dead replica's agents move within it.
const TTL_MS: u64 = 2_000;
/// The agents, each bound to a Telegram group of its own (`group_of`).
const AGENTS: [&str; 4] = ["a1", "a2", "a3", "a4"];

fn group_of(agent: &str) -> String {
    format!("-100{}", &agent[1..])
}

/// A hub of `main` and [`AGENTS`], each on the demo ACP agent.
fn config(dir: &Path) {
    let mut agents = String::from(
        "agents:\n  list:\n    - id: main\n      default: true\n      runtime: {kind: acp, command: [deepcli, demo-agent]}\n",
    );
    let mut bindings = String::from("bindings:\n");
    let mut groups = String::new();
    for agent in AGENTS {
        // Each may spawn children on any other (the Hub across replicas).
        agents.push_str(&format!(
            "    - id: {agent}\n      runtime: {{kind: acp, command: [deepcli, demo-agent]}}\n      subagents: {{allowAgents: [\"*\"]}}\n"
        ));
        let group = group_of(agent);
        bindings.push_str(&format!(
            "  - agentId: {agent}\n    match: {{channel: telegram, peer: {{kind: group, id: \"{group}\"}}}}\n"
        ));
        groups.push_str(&format!("      \"{group}\": {{}}\n"));
    }
    let channels = format!(
        "a2a:\n  expose: [a1, a2, a3, a4]\n  peers:\n    partner:\n      token: {{source: env, id: PARTNER_TOKEN}}\nchannels:\n  telegram:\n    accounts:\n      default:\n        botToken: {{source: env, id: TELEGRAM_BOT_TOKEN}}\n        mode: bridge\n        botUserId: \"{BOT}\"\n        dmPolicy: allowlist\n        allowFrom: [\"{SENDER}\"]\n        webhookSecret: {{source: env, id: DEEPCLI_WEBHOOK_SECRET}}\n    groups:\n{groups}"
    );
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("agents.yaml"), agents).unwrap();
    std::fs::write(dir.join("channels.yaml"), channels).unwrap();
    std::fs::write(dir.join("bindings.yaml"), bindings).unwrap();
}

fn message(agent: &str, id: &str, text: &str) -> Value {
    json!({"channel": "telegram", "peer": {"kind": "group", "id": group_of(agent)},
           "messageId": id, "sender": {"id": SENDER, "name": "Ada"}, "mentions": [BOT],
           "text": text})
}

/// One `deepcli up` of the cluster.
struct Replica {
    id: String,
    child: Child,
    addr: SocketAddr,
    state: PathBuf,
    _logs: std::sync::mpsc::Receiver<String>,
}

impl Replica {
    fn start(home: &Path, schema: &PgSchema, id: &str, extra: &[(&str, &str)]) -> Replica {
        Replica::start_at(home, &schema.url(), id, extra)
    }

    /// [`Replica::start`] on the state at `url`.
    fn start_at(home: &Path, url: &str, id: &str, extra: &[(&str, &str)]) -> Replica {
        let config = home.join("config");
        let state = home.join(format!("state-{id}"));
        let token = home.join("cluster-token");
        std::fs::write(&token, TOKEN).unwrap();
        let mut child = controller(home, &config, &state, |cmd| {
            cmd.env("DEEPCLI_STATE_URL", url)
                .env("DEEPCLI_WEBHOOK_SECRET", SECRET)
                .env("PARTNER_TOKEN", PARTNER)
                .args(["--replica-id", id, "--claim-ttl-ms", &TTL_MS.to_string()])
                // Nothing here waits for a resync: what a replica does, its rounds start.
                .args(["--resync", "3600"])
                .args(["--cluster-token-file", token.to_str().unwrap()])
                .stderr(Stdio::piped());
            for (k, v) in extra {
                cmd.env(k, v);
            }
        });
        let (addr, logs) = listening(&mut child, id);
        Replica {
            id: id.to_owned(),
            child,
            addr,
            state,
            _logs: logs,
        }
    }

    fn status(&self) -> Option<Value> {
        let token = std::fs::read_to_string(self.state.join("operator-token")).ok()?;
        let answer = http(
            self.addr,
            "GET",
            "/v1/status",
            &[("authorization", &format!("Bearer {token}"))],
            b"",
        );
        (answer.status == 200).then_some(answer.body)
    }

    fn send(&self, agent: &str, id: &str, text: &str) -> (u16, Value) {
        signed_inbound(self.addr, SECRET.as_bytes(), &message(agent, id, text))
    }

    /// The agents whose runtimes are ready here.
    fn ready(&self) -> Vec<String> {
        let Some(status) = self.status() else {
            return Vec::new();
        };
        let mut ready: Vec<String> = status["runtimes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["status"] == "ready")
            .map(|r| r["agentId"].as_str().unwrap_or("").to_owned())
            .collect();
        ready.sort();
        ready
    }

    /// The operator's call `method` (`sessions/send`, `runs/cancel`, …) at this replica: its
    /// result.
    fn rpc(&self, method: &str, params: Value) -> Value {
        let token = std::fs::read_to_string(self.state.join("operator-token")).unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1,
            "method": format!("_mustang.agent/{method}"), "params": params});
        let answer = http(
            self.addr,
            "POST",
            "/rpc",
            &[
                ("authorization", &format!("Bearer {token}")),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(answer.status, 200, "{method}: {:#}", answer.body);
        assert!(
            answer.body["error"].is_null(),
            "{method}: {:#}",
            answer.body
        );
        answer.body["result"].clone()
    }

    fn kill(&mut self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }
}

/// [`listening_in_log`], saying what a replica that did not start logged.
fn listening(child: &mut Child, id: &str) -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr piped");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut said = Vec::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!(
                "replica {id} ended before it listened:\n{}",
                said.join("\n")
            );
        };
        if let Some(at) = line.find("addr=") {
            let text = line[at + 5..].split_whitespace().next().unwrap_or("");
            break text.trim_matches('"').parse().unwrap();
        }
        said.push(line);
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (addr, rx)
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows what each replica logged.
        if std::thread::panicking() {
            let lines: Vec<String> = self._logs.try_iter().collect();
            eprintln!("---- replica {} logged:\n{}", self.id, lines.join("\n"));
        }
    }
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every agent ready on exactly one of `replicas`.
fn placed(replicas: &[&Replica]) -> bool {
    let mut all: Vec<String> = replicas.iter().flat_map(|r| r.ready()).collect();
    all.sort();
    let mut want: Vec<String> = AGENTS.iter().map(|a| a.to_string()).collect();
    want.push("main".into());
    want.sort();
    all == want
}

/// Every agent ready on exactly one of `replicas`, and each of them knows where each runs
/// (a replica learns of a claim that moved at its next round).
fn settled(replicas: &[&Replica]) -> bool {
    placed(replicas)
        && replicas.iter().all(|r| {
            r.status().is_some_and(|s| {
                let shown = s["replicas"].as_array().cloned().unwrap_or_default();
                let held: usize = shown
                    .iter()
                    .map(|r| r["agents"].as_array().map_or(0, Vec::len))
                    .sum();
                shown.len() == replicas.len() && held == AGENTS.len() + 1
            })
        })
}

/// [`settled`], and still so with the same agents on each replica a round and more later: a
/// replica that joined may still be taking its share from the others.
fn steady(replicas: &[&Replica]) -> bool {
    if !settled(replicas) {
        return false;
    }
    let shares: Vec<Vec<String>> = replicas.iter().map(|r| r.ready()).collect();
    std::thread::sleep(Duration::from_millis(TTL_MS / 2 + 200));
    settled(replicas) && replicas.iter().map(|r| r.ready()).collect::<Vec<_>>() == shares
}

/// Who runs `agent` among `replicas`.
fn owner<'r>(replicas: &[&'r Replica], agent: &str) -> &'r Replica {
    replicas
        .iter()
        .find(|r| r.ready().iter().any(|a| a == agent))
        .unwrap_or_else(|| panic!("no replica runs {agent}"))
}

/// Held by each test of three replicas: one such test at a time (each runs fifteen agents'
/// processes and holds about ninety PostgreSQL connections).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Three replicas, `r-a` (started first, so the leader, with `leader_env` besides), `r-b`
/// and `r-c`, once every agent runs on one of them and each knows where.
fn three(
    home: &Path,
    schema: &PgSchema,
    leader_env: &[(&str, &str)],
) -> (Replica, Replica, Replica) {
    config(&home.join("config"));
    let a = Replica::start(home, schema, "r-a", leader_env);
    wait_for(
        "r-a to apply and run every agent",
        Duration::from_secs(60),
        || placed(&[&a]),
    );
    let b = Replica::start(home, schema, "r-b", &[]);
    let c = Replica::start(home, schema, "r-c", &[]);
    wait_for(
        "the agents spread over three replicas",
        Duration::from_secs(60),
        || steady(&[&a, &b, &c]) && [&a, &b, &c].iter().all(|r| !r.ready().is_empty()),
    );
    (a, b, c)
}

/// Messages sent round-robin to three replicas reach their agents wherever those run, each
/// answered once and in order; a redelivery to another replica gets the stored answer; the
/// internal door takes only the cluster token; `status` shows who leads and runs what.
#[test]
fn three_replicas_share_the_agents_and_any_of_them_answers() {
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    let (a, b, c) = three(home.path(), &schema, &[]);
    let replicas = [&a, &b, &c];

    // Each replica runs a share; none runs everything.
    let shares: Vec<Vec<String>> = replicas.iter().map(|r| r.ready()).collect();
    assert!(shares.iter().all(|s| s.len() < 5), "{shares:?}");

    let mut n = 0;
    for round in 0..3 {
        for agent in AGENTS {
            let to = replicas[n % 3];
            n += 1;
            let text = format!("{agent} round {round}");
            let (status, answer) = to.send(agent, &format!("{agent}-{round}"), &text);
            assert_eq!(status, 200, "{} for {agent}: {answer:#}", to.id);
            assert_eq!(
                answer["reply"]["text"],
                format!("echo: {text}"),
                "{answer:#}"
            );
            assert_eq!(answer["route"]["agentId"], agent);
            assert_eq!(answer["duplicate"], false);
        }
    }
    // Each conversation's lines, in the order sent, each once.
    for agent in AGENTS {
        let said = schema
            .query(&format!(
                "SELECT string_agg(text, '|' ORDER BY id) FROM transcript
                 WHERE session_key LIKE 'agent:{agent}:%' AND provenance = 'inbound'"
            ))
            .unwrap();
        assert_eq!(
            said,
            format!("{agent} round 0|{agent} round 1|{agent} round 2"),
            "{agent}"
        );
    }
    // A redelivery to each other replica: the first answer, from the shared record.
    for r in replicas {
        let (status, again) = r.send("a1", "a1-0", "a1 round 0");
        assert_eq!(status, 200, "{again:#}");
        assert_eq!(again["duplicate"], true, "{}: {again:#}", r.id);
        assert_eq!(again["reply"]["text"], "echo: a1 round 0");
    }
    let lines = schema
        .query("SELECT count(*) FROM transcript WHERE session_key LIKE 'agent:a1:%' AND provenance = 'inbound'")
        .unwrap();
    assert_eq!(lines, "3", "a redelivery was prompted again");

    // The door between replicas takes the cluster token, and nothing else.
    let body = message("a1", "x-1", "sneaking in").to_string();
    let operator = std::fs::read_to_string(a.state.join("operator-token")).unwrap();
    for token in [None, Some("wrong"), Some(operator.as_str())] {
        let mut headers = vec![
            ("x-deepcli-caller", "operator"),
            ("content-type", "application/json"),
        ];
        if let Some(token) = token {
            headers.push(("x-deepcli-cluster-token", token));
        }
        for door in [
            "/internal/turn",
            "/internal/hub-turn",
            "/internal/hub-session",
        ] {
            let answer = http(a.addr, "POST", door, &headers, body.as_bytes());
            assert_eq!(answer.status, 401, "{door}, {token:?}: {:#}", answer.body);
        }
    }

    // `status`: three replicas, one leader, every agent on one of them.
    let status = b.status().unwrap();
    let shown = status["replicas"].as_array().unwrap();
    let ids: Vec<&str> = shown.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r-a", "r-b", "r-c"]);
    assert_eq!(shown.iter().filter(|r| r["leader"] == true).count(), 1);
    assert_eq!(
        shown[0]["leader"], true,
        "the first replica leads: {status:#}"
    );
    let mut agents: Vec<&str> = shown
        .iter()
        .flat_map(|r| r["agents"].as_array().unwrap())
        .map(|a| a.as_str().unwrap())
        .collect();
    agents.sort();
    assert_eq!(agents, ["a1", "a2", "a3", "a4", "main"]);
    let accounts: Vec<&Value> = shown
        .iter()
        .flat_map(|r| r["accounts"].as_array().unwrap())
        .collect();
    assert_eq!(accounts, [&json!("telegram/default")]);
    assert_eq!(status["replica"], "r-b");
    assert!(
        shown[1]["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", b.addr.port())),
        "{status:#}"
    );
}

/// A TCP proxy to this machine's PostgreSQL that can be cut — every connection through it
/// closed, new ones refused — and mended: PostgreSQL unreachable for one replica.
struct Proxy {
    addr: SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    /// A proxy to the host and port of `url`.
    fn to(url: &str) -> Proxy {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::Ordering::SeqCst;
        let rest = url.split_once('@').map_or(url, |(_, rest)| rest);
        let target = rest.split(['/', '?']).next().unwrap().to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy {
            addr: listener.local_addr().unwrap(),
            cut: Default::default(),
            open: Default::default(),
        };
        let (cut, open) = (proxy.cut.clone(), proxy.open.clone());
        let pipe = |mut from: TcpStream, mut to: TcpStream| {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Write);
            });
        };
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if cut.load(SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut open = open.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        proxy
    }

    /// `url` with its host and port this proxy's.
    fn url(&self, url: &str) -> String {
        let (user, rest) = url.split_once('@').unwrap();
        let at = rest.find(['/', '?']).unwrap();
        format!("{user}@{}{}", self.addr, &rest[at..])
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn mend(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The live processes `replica` runs (its agents' runtimes, in their sandboxes).
fn children(replica: &Replica) -> usize {
    let pid = replica.child.id();
    let live = |child: &str| {
        std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, s)| !s.starts_with('Z'))
        })
    };
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .map(|children| children.split_whitespace().filter(|c| live(c)).count())
        .sum()
}

/// A replica that cannot reach PostgreSQL stops what it ran once its claims' time has passed,
/// and the other takes it all over; with PostgreSQL back, it rejoins and takes a share again.
#[test]
fn a_replica_cut_off_from_postgresql_stops_its_agents_and_rejoins() {
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    config(&home.path().join("config"));
    let a = Replica::start(home.path(), &schema, "r-a", &[]);
    wait_for("r-a to run every agent", Duration::from_secs(60), || {
        placed(&[&a])
    });
    let proxy = Proxy::to(&schema.url());
    let b = Replica::start_at(home.path(), &proxy.url(&schema.url()), "r-b", &[]);
    wait_for(
        "the agents spread over both",
        Duration::from_secs(60),
        || steady(&[&a, &b]) && !b.ready().is_empty(),
    );
    let share = b.ready();
    assert!(children(&b) > 0);

    proxy.cut();
    let cut_at = Instant::now();
    // Its runtimes stop within its claims' time and a round; the other runs everything.
    wait_for("r-b to stop its runtimes", Duration::from_secs(30), || {
        children(&b) == 0
    });
    wait_for(
        "r-a to run every agent again",
        Duration::from_secs(30),
        || placed(&[&a]),
    );
    eprintln!(
        "r-b's agents {share:?} run on r-a {} ms after PostgreSQL was cut off",
        cut_at.elapsed().as_millis()
    );
    for agent in AGENTS {
        let (status, answer) = a.send(agent, &format!("{agent}-cut"), "while cut off");
        assert_eq!(status, 200, "{agent}: {answer:#}");
        assert_eq!(answer["reply"]["text"], "echo: while cut off");
    }

    // PostgreSQL back: r-b rejoins, takes a share, and answers through its door.
    proxy.mend();
    wait_for("r-b to rejoin", Duration::from_secs(60), || {
        steady(&[&a, &b]) && !b.ready().is_empty()
    });
    for agent in AGENTS {
        let (status, answer) = b.send(agent, &format!("{agent}-back"), "back");
        assert_eq!(status, 200, "{agent}: {answer:#}");
        // (An agent that moved back begins a new runtime session, given the conversation so
        // far.)
        let reply = answer["reply"]["text"].as_str().unwrap();
        assert!(
            reply.starts_with("echo: ") && reply.ends_with("back"),
            "{reply}"
        );
    }
}

/// The partner peer's A2A message `id` with `parts` to `agent`, at `replica`: the task, once
/// completed.
fn a2a_send(replica: &Replica, agent: &str, id: &str, parts: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": id, "role": "ROLE_USER", "parts": parts}}});
    let answer = http(
        replica.addr,
        "POST",
        &format!("/a2a/{agent}/"),
        &[
            ("authorization", &format!("Bearer {PARTNER}")),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(answer.status, 200, "{:#}", answer.body);
    let task = answer.body["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    task
}

/// The result of the Hub tool an agent's reply reports (the demo agent's `CALL`).
fn called(tool: &str, answer: &Value) -> Value {
    let reply = answer["reply"]["text"].as_str().unwrap_or("");
    let Some(json) = reply.strip_prefix(&format!("{tool}: ")) else {
        panic!("not a {tool} result: {answer:#}");
    };
    serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {reply}"))
}

/// The notes on run `run_id`'s events, in order.
fn notes(schema: &PgSchema, run_id: &str) -> String {
    schema
        .query(&format!(
            "SELECT string_agg(coalesce(state, '') || ': ' || coalesce(note, ''), E'\n' ORDER BY id)
             FROM hub_run_events WHERE run_id = '{run_id}'"
        ))
        .unwrap_or_default()
}

/// Column `column` of run `run_id`'s record (empty when there is none).
fn run_field(schema: &PgSchema, run_id: &str, column: &str) -> String {
    schema
        .query(&format!(
            "SELECT {column} FROM hub_runs WHERE run_id = '{run_id}'"
        ))
        .unwrap_or_default()
}

fn run_state(schema: &PgSchema, run_id: &str) -> String {
    run_field(schema, run_id, "state")
}

/// Hub runs between agents that run on different replicas (docs/scale-out.md, "The Hub across
/// replicas"): a send answered, with its reply-back loop and announce going both ways; a
/// spawned child run on the other replica, announced to its parent and closed there; the
/// operator's send, close and cancel, asked of a replica that runs neither agent.
#[test]
fn hub_runs_reach_agents_that_run_on_other_replicas() {
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    let (a, b, c) = three(home.path(), &schema, &[]);
    let replicas = [&a, &b, &c];
    let runs_on = |agent: &str| {
        replicas
            .iter()
            .position(|r| r.ready().iter().any(|a| a == agent))
            .unwrap()
    };
    let (x, y) = AGENTS
        .iter()
        .flat_map(|x| AGENTS.iter().map(move |y| (*x, *y)))
        .find(|(x, y)| runs_on(x) != runs_on(y))
        .expect("two agents on different replicas");
    let third = replicas[3 - runs_on(x) - runs_on(y)];
    let y_main = format!("agent:{y}:main");
    let inter_session = |like: &str| {
        schema
            .query(&format!(
                "SELECT count(*) FROM transcript WHERE session_key LIKE '{like}' AND provenance = 'inter_session'"
            ))
            .unwrap()
    };

    // x sends to y (through the third replica's door): y's answer comes back to x's tool call.
    let call = json!({"agentId": y, "message": "SAY pong from the other replica"});
    let (status, answer) = third.send(x, "send-1", &format!("CALL sessions_send {call}"));
    assert_eq!(status, 200, "{answer:#}");
    let sent = called("sessions_send", &answer);
    assert_eq!(sent["status"], "ok", "{sent:#}");
    assert_eq!(sent["reply"], "pong from the other replica", "{sent:#}");
    let run = sent["runId"].as_str().unwrap().to_owned();
    // The reply-back loop (five turns, x first) and the announce step into y: each turn once.
    wait_for("the announce step", Duration::from_secs(60), || {
        notes(&schema, &run).contains("announce step")
    });
    assert_eq!(
        run_state(&schema, &run),
        "completed",
        "{}",
        notes(&schema, &run)
    );
    assert!(
        notes(&schema, &run).contains("reply-back loop: 5 turns"),
        "{}",
        notes(&schema, &run)
    );
    assert_eq!(
        inter_session(&y_main),
        "4",
        "the send, two reply-backs, the announce"
    );
    assert_eq!(inter_session(&format!("agent:{x}:telegram:%")), "3");

    // x spawns a child on y, which runs where y runs: its answer is announced to x, and the
    // child (cleanup: delete) is closed.
    let call = json!({"agentId": y, "task": "SAY the child's answer", "cleanup": "delete"});
    let (status, answer) = third.send(x, "spawn-1", &format!("CALL sessions_spawn {call}"));
    assert_eq!(status, 200, "{answer:#}");
    let spawned = called("sessions_spawn", &answer);
    assert_eq!(spawned["status"], "accepted", "{spawned:#}");
    let run = spawned["runId"].as_str().unwrap().to_owned();
    let child = spawned["childSessionKey"].as_str().unwrap().to_owned();
    assert!(
        child.starts_with(&format!("agent:{y}:subagent:")),
        "{child}"
    );
    wait_for("the child's run announced", Duration::from_secs(60), || {
        notes(&schema, &run).contains("announced to the parent")
    });
    assert_eq!(
        run_state(&schema, &run),
        "completed",
        "{}",
        notes(&schema, &run)
    );
    let reply = run_field(&schema, &run, "reply");
    assert_eq!(reply, "the child's answer");
    // Closed (its transcript in the trash: cleanup delete) once announced.
    wait_for("the child closed", Duration::from_secs(30), || {
        schema
            .query(&format!(
                "SELECT count(*) FROM hub_sessions WHERE session_key = '{child}' AND closed_at IS NOT NULL"
            ))
            .as_deref()
            == Some("1")
    });

    // x asks y for a note as a task; y hands it in where y runs, and x gets it where x runs
    // (fetched from y's replica, checked against its hash).
    let y_workspace = replicas[runs_on(y)].state.join("workspaces").join(y);
    std::fs::write(y_workspace.join("note.txt"), "the note's words").unwrap();
    let put = json!({"taskId": "$TASK", "path": "note.txt"});
    let call = json!({"agentId": y, "title": format!("CALL artifacts_put {put}"),
                      "acceptance": "the note is handed in"});
    let (status, answer) = third.send(x, "task-1", &format!("CALL tasks_create {call}"));
    assert_eq!(status, 200, "{answer:#}");
    let task = called("tasks_create", &answer)["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for("y to hand the note in", Duration::from_secs(30), || {
        schema
            .query(&format!(
                "SELECT count(*) FROM task_artifacts WHERE task_id = '{task}' AND name = 'note.txt'"
            ))
            .as_deref()
            == Some("1")
    });
    let get = json!({"taskId": task, "name": "note.txt"});
    let (status, answer) = third.send(x, "task-2", &format!("CALL artifacts_get {get}"));
    assert_eq!(status, 200, "{answer:#}");
    let got = called("artifacts_get", &answer);
    assert_eq!(got["text"], "the note's words", "{got:#}");
    let placed = replicas[runs_on(x)]
        .state
        .join("workspaces")
        .join(x)
        .join(got["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(placed).unwrap(), "the note's words");

    // The operator, at the replica that runs neither: a send into y, answered by y.
    let sent = third.rpc(
        "sessions/send",
        json!({"sessionKey": y_main, "message": "SAY the operator was heard", "timeoutSeconds": 30}),
    );
    assert_eq!(sent["status"], "ok", "{sent:#}");
    assert_eq!(sent["reply"], "the operator was heard", "{sent:#}");
    // An A2A peer's message to y, at the replica that runs neither: y's answer.
    let task = a2a_send(
        third,
        y,
        "peer-1",
        json!([{"text": "SAY the peer was heard"}]),
    );
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"], "the peer was heard",
        "{task:#}"
    );
    // A peer's file, at the replica that runs neither: y is given it where y runs (fetched
    // from the replica the peer called, checked by its hash).
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD.encode(b"the peer's bytes");
    let parts = json!([{"text": "SAY got it"},
        {"raw": raw, "filename": "data.txt", "mediaType": "text/plain"}]);
    let task = a2a_send(third, y, "peer-2", parts);
    let given = replicas[runs_on(y)]
        .state
        .join("workspaces")
        .join(y)
        .join(".deepcli/a2a")
        .join(task["id"].as_str().unwrap())
        .join("data.txt");
    assert_eq!(std::fs::read(&given).unwrap(), b"the peer's bytes");

    // A close of y's session ends its runtime session where y runs.
    let closed = third.rpc("sessions/close", json!({"sessionKey": y_main}));
    assert!(closed["runtime"].is_string(), "{closed:#}");

    // A run x carries into y, cancelled by the operator at the third replica mid-turn: the
    // cancel reaches y's runtime, which confirms it.
    let call = json!({"agentId": y, "message": "SLOW 60", "timeoutSeconds": 0});
    let (status, answer) = third.send(x, "slow-1", &format!("CALL sessions_send {call}"));
    assert_eq!(status, 200, "{answer:#}");
    let slow = called("sessions_send", &answer);
    assert_eq!(slow["status"], "accepted", "{slow:#}");
    let run = slow["runId"].as_str().unwrap().to_owned();
    wait_for(
        "the slow run's turn to begin",
        Duration::from_secs(30),
        || run_state(&schema, &run) == "running",
    );
    let cancelled = third.rpc("runs/cancel", json!({"runId": run}));
    assert_eq!(
        cancelled["state"],
        "cancelled",
        "{cancelled:#}\n{}",
        notes(&schema, &run)
    );

    // The replica that carries a run killed during its turn: the replica that takes the turn
    // records how it ended (no run is left `running`).
    let call = json!({"agentId": y, "message": "SLOW 3", "timeoutSeconds": 0});
    let (status, answer) = third.send(x, "slow-2", &format!("CALL sessions_send {call}"));
    assert_eq!(status, 200, "{answer:#}");
    let run = called("sessions_send", &answer)["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for(
        "the second slow run's turn to begin",
        Duration::from_secs(30),
        || run_state(&schema, &run) == "running",
    );
    let carrier = nix::unistd::Pid::from_raw(replicas[runs_on(x)].child.id() as i32);
    nix::sys::signal::kill(carrier, nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_for(
        "the run recorded by y's replica",
        Duration::from_secs(30),
        || run_state(&schema, &run) == "completed",
    );
    let reply = run_field(&schema, &run, "reply");
    assert_eq!(reply, "slow: done after 3 s");
}

/// The replica that runs an agent killed mid-turn: the turn is `uncertain` and never prompted
/// again, the agent runs on another replica within the claim's time, and new messages are
/// answered through any replica.
#[test]
fn an_agent_runs_on_another_replica_after_its_replica_is_killed() {
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    let (a, b, c) = three(home.path(), &schema, &[]);
    let mut replicas = [a, b, c];
    let victim = {
        let refs: Vec<&Replica> = replicas.iter().collect();
        owner(&refs, "a2").id.clone()
    };
    let at = replicas.iter().position(|r| r.id == victim).unwrap();
    let door = replicas[(at + 1) % 3].addr;
    // A turn that takes a while, sent through another replica.
    let slow = std::thread::spawn(move || {
        signed_inbound(door, SECRET.as_bytes(), &message("a2", "slow-1", "SLOW 30"))
    });
    let begun = || {
        schema
            .query("SELECT count(*) FROM turns_started WHERE message_id = 'slow-1'")
            .as_deref()
            == Some("1")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !begun() {
        if slow.is_finished() {
            panic!("the slow turn ended before it began: {:?}", slow.join());
        }
        assert!(Instant::now() < deadline, "the slow turn did not begin");
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed_at = Instant::now();
    replicas[at].kill(nix::sys::signal::Signal::SIGKILL);
    let _ = replicas[at].child.wait();
    let (status, _) = slow.join().unwrap();
    assert_ne!(status, 200, "the turn of a killed replica was answered");
    let alive: Vec<&Replica> = replicas
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at)
        .map(|(_, r)| r)
        .collect();
    wait_for("a2 to run again", Duration::from_secs(60), || {
        alive.iter().any(|r| r.ready().iter().any(|x| x == "a2"))
    });
    let moved = killed_at.elapsed();
    // Failover measured (the claim's time is 2 s here).
    eprintln!(
        "failover: a2 ready on another replica {} ms after its replica was killed",
        moved.as_millis()
    );
    // The turn under way: uncertain, answered so on every redelivery, never prompted again.
    for r in &alive {
        let (status, again) = r.send("a2", "slow-1", "SLOW 30");
        assert_eq!(status, 200, "{again:#}");
        assert_eq!(again["state"], "uncertain", "{again:#}");
    }
    // New messages, through both live replicas.
    for (i, r) in alive.iter().enumerate() {
        let (status, answer) = r.send("a2", &format!("after-{i}"), &format!("after {i}"));
        assert_eq!(status, 200, "{answer:#}");
        // (The first may come with the conversation so far, when the killed replica had
        // recorded the agent's session before it died.)
        let reply = answer["reply"]["text"].as_str().unwrap();
        assert!(reply.starts_with("echo: "), "{reply}");
        assert!(reply.ends_with(&format!("after {i}")), "{reply}");
    }
    // Every agent runs on the two replicas left.
    wait_for(
        "every agent on the replicas left",
        Duration::from_secs(60),
        || settled(&alive),
    );
    let prompted = schema
        .query("SELECT count(*) FROM transcript WHERE text = 'SLOW 30' AND provenance = 'inbound'")
        .unwrap();
    assert_eq!(prompted, "1", "the slow message is in the transcript once");
}

/// A replica frozen past its claims' time loses them to the others, which take the lead too;
/// resumed, it follows: what it runs again it runs under new claims (new fencing tokens), and
/// what reaches it is answered once.
#[test]
fn a_frozen_replica_loses_its_claims_and_rejoins_as_a_follower() {
    use nix::sys::signal::Signal;
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    let (mut a, b, c) = three(home.path(), &schema, &[]);
    let held_by_a = a.ready();
    assert!(!held_by_a.is_empty());
    let claim_of = |kind: &str, name: &str| -> (String, i64) {
        let row = schema
            .query(&format!(
                "SELECT holder || ' ' || token FROM claims WHERE kind = '{kind}' AND name = '{name}'"
            ))
            .unwrap();
        let (holder, token) = row.split_once(' ').unwrap();
        (holder.to_owned(), token.parse().unwrap())
    };
    let before = claim_of("agent", &held_by_a[0]);
    assert_eq!(before.0, "r-a");
    assert_eq!(claim_of("leader", "").0, "r-a");
    a.kill(Signal::SIGSTOP);
    wait_for(
        "the others to take a's agents and the lead",
        Duration::from_secs(60),
        || placed(&[&b, &c]) && claim_of("leader", "").0 != "r-a",
    );
    let taken = claim_of("agent", &held_by_a[0]);
    assert_ne!(taken.0, "r-a");
    assert!(taken.1 > before.1, "{taken:?} after {before:?}");
    a.kill(Signal::SIGCONT);
    wait_for(
        "r-a to rejoin as a follower",
        Duration::from_secs(60),
        || {
            steady(&[&a, &b, &c])
                && a.status().is_some_and(|s| {
                    s["replicas"].as_array().is_some_and(|r| {
                        r.len() == 3 && r.iter().any(|r| r["id"] == "r-a" && r["leader"] == false)
                    })
                })
        },
    );
    assert_ne!(
        claim_of("leader", "").0,
        "r-a",
        "the lead does not move back"
    );
    // What it runs again, it runs under a claim taken anew.
    for agent in a.ready() {
        let (holder, token) = claim_of("agent", &agent);
        assert_eq!(holder, "r-a");
        assert!(
            token > before.1,
            "{agent} kept a token from before the freeze"
        );
    }
    for (i, agent) in held_by_a.iter().enumerate() {
        let (status, answer) = a.send(agent, &format!("thaw-{i}"), "after the thaw");
        assert_eq!(status, 200, "{answer:#}");
        assert_eq!(answer["reply"]["text"], "echo: after the thaw");
    }
    let lines = schema
        .query("SELECT count(*) FROM transcript WHERE text = 'after the thaw' AND provenance = 'inbound'")
        .unwrap();
    assert_eq!(lines, held_by_a.len().to_string());
}

/// The leader killed in the middle of an apply: another replica takes the lead, finishes the
/// apply from the journal (the step that was under way resumed), and the new agent answers.
#[test]
fn another_replica_finishes_the_apply_of_a_leader_killed_during_it() {
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    let pause = home.path().join("paused");
    let pause_text = pause.to_str().unwrap().to_owned();
    let (mut a, b, c) = three(
        home.path(),
        &schema,
        &[
            ("DEEPCLI_FAILPOINT", "after:agent.create:a5"),
            ("DEEPCLI_FAILPOINT_PAUSE", &pause_text),
        ],
    );
    // A new agent, on a group of its own.
    let config = home.path().join("config");
    let agents = std::fs::read_to_string(config.join("agents.yaml")).unwrap()
        + "    - id: a5\n      runtime: {kind: acp, command: [deepcli, demo-agent]}\n";
    let bindings = std::fs::read_to_string(config.join("bindings.yaml")).unwrap()
        + "  - agentId: a5\n    match: {channel: telegram, peer: {kind: group, id: \"-1005\"}}\n";
    let channels =
        std::fs::read_to_string(config.join("channels.yaml")).unwrap() + "      \"-1005\": {}\n";
    std::fs::write(config.join("channels.yaml"), channels).unwrap();
    std::fs::write(config.join("bindings.yaml"), bindings).unwrap();
    std::fs::write(config.join("agents.yaml"), agents).unwrap();
    wait_for(
        "the leader to stop inside the apply",
        Duration::from_secs(60),
        || pause.exists(),
    );
    let open = schema
        .query("SELECT count(*) FROM history WHERE outcome = 'running'")
        .unwrap();
    assert_eq!(open, "1", "the apply is under way");
    // An apply longer than the claims' time keeps them: they are renewed beside it.
    let claims = || {
        schema
            .query("SELECT string_agg(kind || ':' || name || '=' || holder || '/' || token, ' ' ORDER BY kind, name) FROM claims")
            .unwrap()
    };
    let before = claims();
    assert!(before.contains("leader:=r-a/"), "{before}");
    std::thread::sleep(Duration::from_millis(3 * TTL_MS));
    assert_eq!(claims(), before, "claims moved while the leader applied");
    a.kill(nix::sys::signal::Signal::SIGKILL);
    let _ = a.child.wait();
    let alive = [&b, &c];
    wait_for(
        "a5 to run on a replica left",
        Duration::from_secs(60),
        || alive.iter().any(|r| r.ready().iter().any(|x| x == "a5")),
    );
    let leader = schema
        .query("SELECT holder FROM claims WHERE kind = 'leader'")
        .unwrap();
    assert!(leader == "r-b" || leader == "r-c", "{leader}");
    // The interrupted apply is on record as such, and the one that finished it as applied.
    let outcomes = schema
        .query("SELECT string_agg(outcome, ',' ORDER BY id) FROM history WHERE id > 1")
        .unwrap();
    assert_eq!(outcomes, "interrupted,applied", "{outcomes}");
    let left_open = schema
        .query("SELECT count(*) FROM journal WHERE status = 'started'")
        .unwrap();
    assert_eq!(left_open, "0");
    // Both replicas put the new generation in force: either door answers for a5.
    let message = json!({"channel": "telegram", "peer": {"kind": "group", "id": "-1005"},
        "sender": {"id": SENDER, "name": "Ada"}, "mentions": [BOT]});
    for (i, r) in alive.iter().enumerate() {
        let mut m = message.clone();
        m["messageId"] = format!("new-{i}").into();
        m["text"] = format!("hello a5 {i}").into();
        let mut answered = None;
        wait_for("a5 answered", Duration::from_secs(20), || {
            let (status, answer) = signed_inbound(r.addr, SECRET.as_bytes(), &m);
            answered = Some(answer);
            status == 200
        });
        let answer = answered.unwrap();
        assert_eq!(
            answer["reply"]["text"],
            format!("echo: hello a5 {i}"),
            "{answer:#}"
        );
        assert_eq!(answer["route"]["agentId"], "a5");
    }
}

/// The replica that holds a Telegram account (long polling on the fake Bot API) killed: the
/// other takes the account within the claim's time and polls from the offset on record, so
/// the update that came meanwhile is answered, and the one answered before is not again.
#[test]
fn a_telegram_account_moves_to_another_replica_with_its_offset() {
    use crate::adapters::telegram_fake::{Server, TOKEN, Waits};
    let _one = one_at_a_time();
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    let server = Server::start().unwrap();
    let fake = &server.fake;
    let config = home.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n      default: true\n      runtime: {kind: acp, command: [deepcli, demo-agent]}\n",
    )
    .unwrap();
    std::fs::write(
        config.join("channels.yaml"),
        format!(
            "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: {{source: env, id: TG_TOKEN}}\n        apiBase: \"{}\"\n        dmPolicy: open\n        allowFrom: [\"*\"]\n",
            server.base()
        ),
    )
    .unwrap();
    std::fs::write(config.join("bindings.yaml"), "bindings: []\n").unwrap();
    let env = [
        ("TG_TOKEN", TOKEN),
        ("DEEPCLI_FAILPOINT_ADAPTER", crate::adapters::FAST),
    ];
    let a = Replica::start(home.path(), &schema, "r-a", &env);
    let b = Replica::start(home.path(), &schema, "r-b", &env);
    let polling = |r: &Replica| {
        r.status().is_some_and(|s| {
            s["channels"]["telegram"]["accounts"]["default"]["adapter"]["state"] == "connected"
        })
    };
    let mut replicas = [a, b];
    let mut holder = None;
    wait_for(
        "one replica to hold the account",
        Duration::from_secs(60),
        || {
            let both = replicas.iter().all(|r| {
                r.status()
                    .is_some_and(|s| s["replicas"].as_array().is_some_and(|r| r.len() == 2))
            });
            let holding: Vec<usize> = (0..2).filter(|i| polling(&replicas[*i])).collect();
            holder = (holding.len() == 1).then(|| holding[0]);
            both && holder.is_some()
        },
    );
    let held = holder.unwrap();
    let dm = json!({"id": 5, "type": "private", "first_name": "Ada"});
    let ada = json!({"id": 5, "is_bot": false, "first_name": "Ada"});
    let first = fake.message(dm.clone(), ada.clone(), "one", json!({}));
    fake.wait_sent(1);
    // Killed only once the update is done with (out of the adapter's inbox): a kill between
    // the platform's accept of the reply and its record has the next holder post it again
    // (at least once: docs/conversations.md), which is not what this test is about.
    wait_for(
        "the first update done with",
        Duration::from_secs(30),
        || {
            schema
                .query("SELECT count(*) FROM adapter_inbox")
                .as_deref()
                == Some("0")
        },
    );

    replicas[held].kill(nix::sys::signal::Signal::SIGKILL);
    let _ = replicas[held].child.wait();
    let polls_before = fake.calls_of("getUpdates").len();
    // While no replica polls.
    fake.message(dm, ada, "two", json!({}));
    let other = &replicas[1 - held];
    wait_for("the other replica to poll", Duration::from_secs(60), || {
        polling(other)
    });
    let sent = fake.wait_sent(2);
    let texts: Vec<&str> = sent.iter().map(|s| s["text"].as_str().unwrap()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        texts[0].ends_with("one") && texts[1].ends_with("two"),
        "{texts:?}"
    );
    // The new holder asked from past the update answered before.
    let polls = fake.calls_of("getUpdates");
    let first_poll = &polls[polls_before..]
        .iter()
        .find(|c| c.body.get("offset").is_some())
        .expect("a poll with an offset")
        .body;
    assert!(
        first_poll["offset"].as_i64().unwrap() > first["update_id"].as_i64().unwrap(),
        "{first_poll}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(fake.sent().len(), 2, "an update was answered twice");
}

/// Two processes given one `--replica-id`: the second does not run as the first; it says
/// what to do and exits.
#[test]
fn a_second_process_with_a_replicas_id_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    config(&home.path().join("config"));
    let _a = Replica::start(home.path(), &schema, "r-a", &[]);
    let config = home.path().join("config");
    let state = home.path().join("state-twin");
    let twin = controller(home.path(), &config, &state, |cmd| {
        cmd.env("DEEPCLI_STATE_URL", schema.url())
            .env("DEEPCLI_WEBHOOK_SECRET", SECRET)
            .args(["--replica-id", "r-a", "--claim-ttl-ms", &TTL_MS.to_string()])
            .stderr(Stdio::piped());
    });
    let mut twin = twin;
    let stderr = twin.stderr.take().unwrap();
    let read = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = twin.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = twin.kill();
            let _ = twin.wait();
            panic!("a second r-a ran: {}", read.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let said = read.join().unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("another deepcli up runs as replica `r-a`")
            && said.contains("give each replica its own --replica-id"),
        "{said}"
    );
}

/// What a replica's flags refuse, before anything is made: the flags on a `state.db`, a short
/// cluster token, an address the others cannot reach.
#[test]
fn a_replicas_flags_are_checked_before_anything_starts() {
    let home = tempfile::tempdir().unwrap();
    let schema = PgSchema::new();
    config(&home.path().join("config"));
    let state = home.path().join("state");
    let up = |url: Option<&str>, env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = std::process::Command::new(crate::common::bin());
        cmd.args(["--config", home.path().join("config").to_str().unwrap()])
            .args(["--state-dir", state.to_str().unwrap(), "up"])
            .args(args)
            .env_remove("DEEPCLI_STATE_URL")
            .env_remove("DEEPCLI_CLUSTER_TOKEN")
            .env("NO_COLOR", "1");
        if let Some(url) = url {
            cmd.env("DEEPCLI_STATE_URL", url);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        // A build that does not refuse would run on: stopped after a while, no exit code.
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let read = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let deadline = Instant::now() + Duration::from_secs(20);
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (code, read.join().unwrap())
    };
    let (code, said) = up(None, &[], &["--replica-id", "a", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("--replica-id is for controllers that share a PostgreSQL state"),
        "{said}"
    );
    let url = schema.url();
    let (code, said) = up(
        Some(&url),
        &[("DEEPCLI_CLUSTER_TOKEN", "short")],
        &["--listen", "127.0.0.1:0"],
    );
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("shorter than 16 characters"), "{said}");
    let (code, said) = up(Some(&url), &[], &["--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("give --advertise URL"), "{said}");
    assert!(!state.exists(), "a refused start made the state directory");
}
