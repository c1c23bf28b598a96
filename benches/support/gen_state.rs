//! A year of a busy hub, for `scripts/bench-state`:
//!
//! ```text
//! deepcli-gen-state write-config DIR [--agents N] [--echo-agents N] [--secret-env VAR]
//! deepcli-gen-state fill STATE_DIR [--sessions N] [--transcript-rows N] [--deliveries N]
//!                   [--runs N] [--agents N] [--days N] [--load-peers N] [--seed N]
//! ```
//!
//! * `write-config` writes a config of `--agents` agents (`agent-0` …), the first
//!   `--echo-agents` of them running the shipped echo agent (`acp`, `[deepcli, echo-agent]`), a
//!   channel `webchat` whose `default` account takes signed envelopes (`webhookSecret: {source:
//!   env, id: VAR}`, `dmPolicy: open`) and one binding of that account to `agent-0`; direct
//!   sessions are per channel and peer. No retention: the script adds `state.retention`.
//! * `fill` opens the state through the crate's own [`StateStore`] (so a new one is made and
//!   migrated as `deepcli` makes it, and an existing one is checked), takes the lease, and
//!   fills the Access and Hub tables with a year of generated records, in large transactions of
//!   prepared statements. The agents themselves are the config's, applied before (`deepcli
//!   apply`): `fill` refuses a state whose sessions or transcript already hold rows.
//!
//! What `fill` writes (every time RFC 3339 UTC to the second, as the state writes them, spread
//! evenly over the last `--days` days, transcript ids in time order):
//!
//! * `transcript`: `--transcript-rows` rows, as turns of two rows (a message and its answer).
//!   `--deliveries` turns are inbound chat messages (provenance `inbound`, with sender and route)
//!   with their `deliveries` row and a `budget_events` turn; `--runs` turns carry a Hub run
//!   (`inter_session`, the run's provenance record as route) with its `hub_runs` row (a
//!   `sessions_send`, 95 % completed, 3 % failed, 2 % timed out), three `hub_run_events`
//!   (accepted, running, final) and a `budget_events` turn; the rest are heartbeats to the
//!   agents' main sessions (`heartbeat` both ways). Texts are 20–160 characters asked, 40–400
//!   answered.
//! * `sessions`: `--sessions` rows, runtime sessions of no live runtime (`runtime_instance`
//!   NULL: the next turn opens a new one): each agent's main session and chat sessions
//!   (telegram, slack and discord; one in five a group). The first `--load-peers` chat sessions
//!   are the ones `deepcli-load inbound --channel webchat` speaks in
//!   (`agent:agent-0:webchat:direct:bench-peer-<i>`), so the measured turns go on long
//!   conversations. A chat turn picks its session at random, a run its target among all.
//!
//! Prints one JSON object: the rows written per table, the seconds it took, the state
//! directory's files' sizes, and sample session keys (`typicalSession`, `busiestSession`) and
//! a run id for the script's reads.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use deepcli::state::{LeasePurpose, StateDir, StateStore};
use rusqlite::{Connection, params};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "deepcli-gen-state",
    about = "A year of a busy hub in a state directory (bench-tools)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the config: the agents, the signed `webchat` channel, its binding.
    WriteConfig {
        dir: PathBuf,
        #[arg(long, default_value_t = 1000)]
        agents: usize,
        /// The first N agents run the echo agent.
        #[arg(long, default_value_t = 1)]
        echo_agents: usize,
        /// The environment variable holding the `webchat` account's webhook secret.
        #[arg(long, default_value = "DEEPCLI_BENCH_WEBHOOK_SECRET")]
        secret_env: String,
    },
    /// Fill a state directory's tables with a year of records.
    Fill(FillArgs),
}

#[derive(Args)]
struct FillArgs {
    state_dir: PathBuf,
    /// The config's agents (`agent-0` …).
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    #[arg(long, default_value_t = 100_000)]
    sessions: usize,
    #[arg(long, default_value_t = 10_000_000)]
    transcript_rows: usize,
    #[arg(long, default_value_t = 1_000_000)]
    deliveries: usize,
    #[arg(long, default_value_t = 500_000)]
    runs: usize,
    /// How far back the records go.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Sessions of `agent-0` on `webchat` that `deepcli-load` speaks in.
    #[arg(long, default_value_t = 100)]
    load_peers: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::WriteConfig {
            dir,
            agents,
            echo_agents,
            secret_env,
        } => write_config(&dir, agents, echo_agents, &secret_env),
        Command::Fill(args) => fill(&args).map(|summary| println!("{summary}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn write_config(
    dir: &Path,
    agents: usize,
    echo_agents: usize,
    secret_env: &str,
) -> Result<(), String> {
    let mut text = String::from("agents:\n  list:\n");
    for i in 0..agents.max(1) {
        text.push_str(&format!("    - id: agent-{i}\n"));
        if i == 0 {
            text.push_str("      default: true\n");
        }
        if i < echo_agents {
            text.push_str("      runtime: {kind: acp, command: [deepcli, echo-agent]}\n");
        }
    }
    text.push_str("session:\n  dmScope: per-channel-peer\n");
    let channels = format!(
        "channels:\n  webchat:\n    accounts:\n      default:\n        webhookSecret: {{source: env, id: {secret_env}}}\n        dmPolicy: open\n        allowFrom: [\"*\"]\n"
    );
    let bindings =
        "bindings:\n  - agentId: agent-0\n    match: {channel: webchat, accountId: default}\n";
    let write = |name: &str, body: &str| std::fs::write(dir.join(name), body);
    std::fs::create_dir_all(dir)
        .and_then(|()| write("agents.yaml", &text))
        .and_then(|()| write("channels.yaml", &channels))
        .and_then(|()| write("bindings.yaml", bindings))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// xorshift64*: tiny, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// A UUID-shaped id (what the Hub's run and correlation ids look like).
    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }
}

/// Words the generated texts are cut from.
const WORDS: &str = "the deploy went out at noon and the canary looked fine until the cache warmed \
up then latency doubled on the eu shards so we rolled back and opened an incident can you check \
whether the retry budget was spent before the alert fired and summarize what the on call saw in \
the last hour please include the dashboards and the queries you ran and say what you would change \
in the runbook next time we see this pattern of errors on a friday afternoon before a release ";

/// A text of `len` characters (or a little less) from a random place in [`WORDS`].
fn text(rng: &mut Rng, len: usize) -> String {
    let mut out = String::with_capacity(len);
    let bytes = WORDS.as_bytes();
    let mut at = rng.below(bytes.len());
    while out.len() < len {
        let take = (len - out.len()).min(bytes.len() - at);
        // WORDS is ASCII: any cut is a char boundary.
        out.push_str(&WORDS[at..at + take]);
        at = 0;
    }
    out
}

/// One conversation: its key and what a delivery into it names.
struct Session {
    key: String,
    agent: String,
    channel: &'static str,
    peer_kind: &'static str,
    peer_id: String,
}

const CHANNELS: [&str; 3] = ["telegram", "slack", "discord"];

/// Session `i` of `chat` chat sessions (then the agents' main sessions).
fn session(i: usize, agents: usize, load_peers: usize, chat: usize) -> Session {
    if i >= chat {
        let agent = format!("agent-{}", i - chat);
        return Session {
            key: format!("agent:{agent}:main"),
            agent,
            channel: "",
            peer_kind: "",
            peer_id: String::new(),
        };
    }
    if i < load_peers {
        let peer_id = format!("bench-peer-{i}");
        return Session {
            key: format!("agent:agent-0:webchat:direct:{peer_id}"),
            agent: "agent-0".into(),
            channel: "webchat",
            peer_kind: "direct",
            peer_id,
        };
    }
    let agent = format!("agent-{}", (i * 7919) % agents);
    let channel = CHANNELS[i % CHANNELS.len()];
    let (peer_kind, peer_id) = if i.is_multiple_of(5) {
        ("group", format!("g{i}"))
    } else {
        ("direct", format!("u{i}"))
    };
    Session {
        key: format!("agent:{agent}:{channel}:{peer_kind}:{peer_id}"),
        agent,
        channel,
        peer_kind,
        peer_id,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Turn {
    Heartbeat,
    Delivered,
    Run,
}

/// Seconds since the epoch as the state writes times.
fn stamp(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| String::new(), |t| t.to_string())
}

/// Turns written per transaction.
const CHUNK: usize = 50_000;

/// What writing the year's turns keeps between them.
struct Year {
    rng: Rng,
    agents: usize,
    chat: usize,
    load_peers: usize,
    sessions: usize,
    /// A run id for the script's reads.
    sample_run: String,
}

impl Year {
    /// Writes turn `t` (asked at `at`, answered at `answered`) with the records of its kind;
    /// the index of its session.
    fn turn(
        &mut self,
        c: &Connection,
        t: usize,
        kind: Turn,
        at: i64,
        answered: i64,
    ) -> rusqlite::Result<usize> {
        let (at_s, answered_s) = (stamp(at), stamp(answered));
        let len = self.rng.between(20, 160);
        let asked = text(&mut self.rng, len);
        let len = self.rng.between(40, 400);
        let answer = text(&mut self.rng, len);
        let s = match kind {
            Turn::Heartbeat => self.chat + self.rng.below(self.agents),
            Turn::Delivered => self.rng.below(self.chat),
            Turn::Run => self.rng.below(self.sessions),
        };
        let target = session(s, self.agents, self.load_peers, self.chat);
        let mut transcript = c.prepare_cached(
            "INSERT INTO transcript (session_key, provenance, message_id, sender, text, route, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut budget = c.prepare_cached(
            "INSERT INTO budget_events (agent_id, kind, at_ms, at, session_key, run_id, tokens, cost_micros)
             VALUES (?1, 'turn', ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let none = None::<String>;
        match kind {
            Turn::Heartbeat => {
                let prompt = "Read HEARTBEAT.md if it exists and follow it. If nothing needs attention, reply HEARTBEAT_OK.";
                let reply = if t.is_multiple_of(4) {
                    answer.as_str()
                } else {
                    "HEARTBEAT_OK"
                };
                transcript.execute(params![
                    target.key,
                    "heartbeat",
                    none,
                    none,
                    prompt,
                    none,
                    at_s
                ])?;
                transcript.execute(params![
                    target.key,
                    "heartbeat",
                    none,
                    none,
                    reply,
                    none,
                    answered_s
                ])?;
            }
            Turn::Delivered => {
                let message_id = format!("m{t}");
                let sender =
                    json!({"id": target.peer_id, "name": format!("User {}", target.peer_id)});
                let route = json!({
                    "agentId": target.agent,
                    "channel": target.channel,
                    "accountId": "default",
                    "sessionKey": target.key,
                    "mainSessionKey": format!("agent:{}:main", target.agent),
                    "lastRoutePolicy": "session",
                    "matchedBy": "binding.account",
                });
                transcript.execute(params![
                    target.key,
                    "inbound",
                    message_id,
                    sender.to_string(),
                    asked,
                    route.to_string(),
                    at_s
                ])?;
                transcript.execute(params![
                    target.key, "agent", none, none, answer, none, answered_s
                ])?;
                let response = json!({
                    "delivered": true,
                    "sessionKey": target.key,
                    "route": route,
                    "reply": {"text": answer},
                });
                c.prepare_cached(
                    "INSERT INTO deliveries (channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at)
                     VALUES (?1, 'default', ?2, ?3, '', ?4, ?5, ?6, ?7)",
                )?
                .execute(params![
                    target.channel, target.peer_kind, target.peer_id, message_id, target.key,
                    response.to_string(), answered_s
                ])?;
                budget.execute(params![
                    target.agent,
                    answered * 1000,
                    answered_s,
                    target.key,
                    none,
                    self.rng.between(200, 20_000) as i64,
                    self.rng.between(100, 50_000) as i64
                ])?;
            }
            Turn::Run => {
                let from = session(
                    self.rng.below(self.chat),
                    self.agents,
                    self.load_peers,
                    self.chat,
                );
                let run_id = self.rng.uuid();
                let correlation = self.rng.uuid();
                let meta = json!({
                    "kind": "inter_session",
                    "sourceSessionKey": from.key,
                    "sourceAgentId": from.agent,
                    "sourceTool": "sessions_send",
                    "runId": run_id,
                    "correlationId": correlation,
                });
                transcript.execute(params![
                    target.key,
                    "inter_session",
                    none,
                    none,
                    asked,
                    meta.to_string(),
                    at_s
                ])?;
                transcript.execute(params![
                    target.key, "agent", none, none, answer, none, answered_s
                ])?;
                let (state, error) = match self.rng.below(100) {
                    0..=94 => ("completed", None),
                    95..=97 => ("failed", Some("the runtime ended the turn with an error")),
                    _ => ("timed_out", Some("no answer within timeoutSeconds")),
                };
                let reply = (state == "completed").then_some(answer.as_str());
                c.prepare_cached(
                    "INSERT INTO hub_runs (run_id, kind, source_tool, state, requester_agent_id, requester_session_key,
                         target_agent_id, target_session_key, correlation_id, message, reply, error,
                         created_at, started_at, finished_at, updated_at)
                     VALUES (?1, 'send', 'sessions_send', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?12)",
                )?
                .execute(params![
                    run_id, state, from.agent, from.key, target.agent, target.key, correlation,
                    asked, reply, error, at_s, answered_s
                ])?;
                let mut event = c.prepare_cached(
                    "INSERT INTO hub_run_events (run_id, at, state, note) VALUES (?1, ?2, ?3, ?4)",
                )?;
                event.execute(params![run_id, at_s, "accepted", "accepted by the Hub"])?;
                event.execute(params![
                    run_id,
                    at_s,
                    "running",
                    "delivered to the target session"
                ])?;
                event.execute(params![
                    run_id,
                    answered_s,
                    state,
                    error.unwrap_or("answered")
                ])?;
                budget.execute(params![
                    target.agent,
                    answered * 1000,
                    answered_s,
                    target.key,
                    run_id,
                    self.rng.between(200, 20_000) as i64,
                    self.rng.between(100, 50_000) as i64
                ])?;
                if self.sample_run.is_empty() || t.is_multiple_of(1000) {
                    self.sample_run = run_id;
                }
            }
        }
        Ok(s)
    }
}

fn fill(args: &FillArgs) -> Result<serde_json::Value, String> {
    let turns = args.transcript_rows / 2;
    let agents = args.agents.max(1);
    if args.deliveries + args.runs > turns {
        return Err(format!(
            "{} deliveries and {} runs need {} transcript rows at least (two a turn)",
            args.deliveries,
            args.runs,
            2 * (args.deliveries + args.runs)
        ));
    }
    if args.sessions < agents + args.load_peers + 1 {
        return Err(format!(
            "--sessions {} leaves no chat sessions beside {agents} main sessions and {} load sessions",
            args.sessions, args.load_peers
        ));
    }
    let chat = args.sessions - agents;
    let started = Instant::now();
    let dir = StateDir::new(&args.state_dir);
    let sql = |e: rusqlite::Error| format!("{}: {e}", dir.db().display());
    let mut store = StateStore::open(&dir).map_err(|e| e.to_string())?;
    store
        .acquire_lease(LeasePurpose::Apply, Duration::from_secs(3))
        .map_err(|e| e.to_string())?;
    let mut c = Connection::open(dir.db()).map_err(sql)?;
    let held: i64 = c
        .query_row(
            "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM transcript)",
            [],
            |r| r.get(0),
        )
        .map_err(sql)?;
    if held > 0 {
        return Err(format!(
            "{} already holds sessions or transcript rows; fill a state with none",
            dir.db().display()
        ));
    }
    // A fill that a crash interrupts is thrown away with its directory: no sync.
    c.execute_batch(
        "PRAGMA synchronous = OFF; PRAGMA cache_size = -1000000; PRAGMA temp_store = MEMORY;",
    )
    .map_err(sql)?;

    let mut rng = Rng(args.seed.max(1));
    // Exactly `deliveries` delivered turns and `runs` run turns, shuffled among the heartbeats.
    let mut kinds = vec![Turn::Heartbeat; turns];
    kinds[..args.deliveries].fill(Turn::Delivered);
    kinds[args.deliveries..args.deliveries + args.runs].fill(Turn::Run);
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i + 1));
    }

    let now = jiff::Timestamp::now().as_second();
    let span = i64::from(args.days) * 86_400;
    let from = now - span;
    // First and last activity of each session, for its row.
    let mut first = vec![i64::MAX; args.sessions];
    let mut last = vec![i64::MIN; args.sessions];
    let mut turns_of = vec![0u32; args.sessions];

    let mut year = Year {
        rng,
        agents,
        chat,
        load_peers: args.load_peers,
        sessions: args.sessions,
        sample_run: String::new(),
    };
    // Transactions of CHUNK turns: the WAL stays small and is checkpointed as it goes.
    for (n, chunk) in kinds.chunks(CHUNK).enumerate() {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        for (i, &kind) in chunk.iter().enumerate() {
            let t = n * CHUNK + i;
            let at = from + (t as i64 * span) / turns.max(1) as i64;
            let answered = (at + year.rng.between(1, 20) as i64).min(now);
            let s = year.turn(&tx, t, kind, at, answered).map_err(sql)?;
            first[s] = first[s].min(at);
            last[s] = last[s].max(answered);
            turns_of[s] += 1;
        }
        tx.commit().map_err(sql)?;
    }
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql)?;
    {
        let mut row = tx
            .prepare(
                "INSERT INTO sessions (session_key, agent_id, runtime_session_id, runtime_instance, created_at, updated_at)
                 VALUES (?1, ?2, ?3, NULL, ?4, ?5)",
            )
            .map_err(sql)?;
        for i in 0..args.sessions {
            let s = session(i, agents, args.load_peers, chat);
            let (created, updated) = if turns_of[i] == 0 {
                (from, from)
            } else {
                (first[i], last[i])
            };
            row.execute(params![
                s.key,
                s.agent,
                format!("sess-{i}"),
                stamp(created),
                stamp(updated)
            ])
            .map_err(sql)?;
        }
    }
    tx.commit().map_err(sql)?;
    let sample_run = year.sample_run;
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .map_err(sql)?;
    drop(c);
    store.release_lease().map_err(|e| e.to_string())?;
    drop(store);

    // The chat session with the median number of turns, and the busiest session.
    let mut by_turns: Vec<usize> = (0..chat).collect();
    by_turns.sort_by_key(|&i| turns_of[i]);
    let typical = by_turns[by_turns.len() / 2];
    let busiest = (0..args.sessions).max_by_key(|&i| turns_of[i]).unwrap_or(0);
    let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    Ok(json!({
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "rows": {
            "sessions": args.sessions,
            "transcript": turns * 2,
            "deliveries": args.deliveries,
            "hub_runs": args.runs,
            "hub_run_events": args.runs * 3,
            "budget_events": args.deliveries + args.runs,
        },
        "bytes": {"db": size(dir.db()), "wal": size(dir.db_wal())},
        "typicalSession": session(typical, agents, args.load_peers, chat).key,
        "typicalSessionRows": 2 * turns_of[typical],
        "busiestSession": session(busiest, agents, args.load_peers, chat).key,
        "busiestSessionRows": 2 * turns_of[busiest],
        "sampleRun": sample_run,
    }))
}
