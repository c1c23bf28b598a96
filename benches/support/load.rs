//! A load generator for the Access API, for `scripts/bench-access`:
//!
//! ```text
//! deepcli-load write-config DIR BINDINGS [--secret-env VAR]
//! deepcli-load route   --addr HOST:PORT --token-file FILE --inputs FILE [load options]
//! deepcli-load inbound --addr HOST:PORT --secret-env VAR --channel C [--peers N] [load options]
//! ```
//!
//! * `write-config` writes the routing bench's config (`generate::generate_routing`, what
//!   `deepcli-plan-mem --write-config` writes) without the generator's placeholder `process`
//!   runtimes, plus an agent `echo` running the shipped echo agent (`acp`,
//!   `[deepcli, echo-agent]`), a channel `webchat` whose `default` account has
//!   `webhookSecret: {source: env, id: VAR}` and `dmPolicy: allowlist` with 10,000 senders in
//!   `allowFrom` (`bench-peer-0` … `bench-peer-9999`: the inbound stage's peers are among
//!   them), and a binding of that account to `echo`.
//! * `route` drives `POST /v1/route` with the operator token, cycling through route inputs
//!   (JSON lines, e.g. `deepcli-plan-mem --emit-inputs`); worker `i` starts at line
//!   `i * lines / concurrency`. Only 200 counts as success; `matchedBy` of every answer is
//!   tallied.
//! * `inbound` drives `POST /v1/inbound`, each body signed with the secret in `VAR`
//!   (`deepcli::sign`). Worker `i` speaks for peer `bench-peer-<i mod peers>` (kind
//!   `--peer-kind`) and sends one message at a time with a unique `messageId`, so with
//!   `concurrency = peers` (the default) there are `peers` sessions, each with one prompt in
//!   flight — the Access layer's per-session FIFO lets no more through anyway. Success is
//!   `--expect-status` (default 200, a reply from the agent; 202 means not delivered to one);
//!   an answer without `"reply":{"text":…}` is counted as `empty_replies`.
//!
//! Load options: `--concurrency N` workers, each with its own keep-alive HTTP/1.1 connection
//! and one request in flight; `--duration SECS` or `--requests N`; `--warmup SECS` of
//! unrecorded load first; `--threads N` client runtime threads; `--watch NAME=PID` (repeatable)
//! reports that process's CPU (utime+stime from `/proc/PID/stat`) over the measured window, as
//! does the client itself (`client`), also as CPU µs per successful request (`cpu_us_per_ok`,
//! from 100 Hz ticks: coarse over short windows). `--rate R` paces the workers to R requests a
//! second in all (latency counted from when each request was due), `--stop-file FILE` ends the
//! measurement early once FILE exists, and `--latencies FILE` writes each recorded request's
//! due time (Unix ms), latency (µs), success (1/0) and time from sending to the answer (µs),
//! one a line.
//!
//! Prints one JSON object: `requests`, `ok`, `errors` (every answer that is not a success, and
//! transport failures), `status` (count per HTTP status), `rps` (successes per second of the
//! measured window), latency `p50_ms` `p90_ms` `p99_ms` `p999_ms` `max_ms` `mean_ms` (of every
//! recorded request, errors included), `cpu_pct` per watched process (100 = one core), and
//! `/proc/loadavg` at the start and the end of the window. Exit status 0 even with errors: the
//! caller judges.

#[path = "generate.rs"]
mod generate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Senders in the `webchat` account's `allowFrom`.
const ALLOW_FROM: usize = 10_000;

#[derive(Parser)]
#[command(
    name = "deepcli-load",
    about = "Load generator for the Access API (bench-tools)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the 10k-style routing config plus the echo agent and the signed `webchat` channel.
    WriteConfig {
        dir: PathBuf,
        bindings: usize,
        /// The environment variable holding the `webchat` account's webhook secret.
        #[arg(long, default_value = "DEEPCLI_BENCH_WEBHOOK_SECRET")]
        secret_env: String,
    },
    /// Drive `POST /v1/route`.
    Route {
        #[command(flatten)]
        load: LoadArgs,
        /// The operator token's file (`<state>/operator-token`).
        #[arg(long)]
        token_file: PathBuf,
        /// Route inputs, one JSON object a line.
        #[arg(long)]
        inputs: PathBuf,
    },
    /// Drive `POST /v1/inbound` with signed envelopes.
    Inbound {
        #[command(flatten)]
        load: LoadArgs,
        /// The environment variable holding the account's webhook secret.
        #[arg(long)]
        secret_env: String,
        #[arg(long)]
        channel: String,
        #[arg(long)]
        account: Option<String>,
        /// Distinct peers (sessions); worker i uses peer i mod peers. Default: --concurrency.
        #[arg(long)]
        peers: Option<usize>,
        #[arg(long, default_value = "direct")]
        peer_kind: String,
        /// The HTTP status that counts as success.
        #[arg(long, default_value_t = 200)]
        expect_status: u16,
    },
}

#[derive(Args, Clone)]
struct LoadArgs {
    /// The server, HOST:PORT.
    #[arg(long)]
    addr: String,
    /// Workers, each with one keep-alive connection and one request in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measure for this long (default 10 s unless --requests is given).
    #[arg(long)]
    duration: Option<f64>,
    /// Measure this many requests instead of a duration.
    #[arg(long)]
    requests: Option<u64>,
    /// Unrecorded load before the measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Threads of the client's runtime.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// NAME=PID: report that process's CPU over the measured window.
    #[arg(long = "watch", value_name = "NAME=PID")]
    watch: Vec<String>,
    /// A request slower than this is abandoned and counted as an error.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// Requests per second in all, each worker sending on its own schedule (concurrency / rate
    /// seconds apart) instead of as fast as it is answered. A latency is then counted from the
    /// time the request was due, so a request sent late because the one before it was slow
    /// counts its wait.
    #[arg(long)]
    rate: Option<f64>,
    /// Stop (before the duration is over) once this file exists.
    #[arg(long)]
    stop_file: Option<PathBuf>,
    /// Write every recorded request to this file: a line of `due_unix_ms latency_us ok
    /// service_us` (service: from sending to the answer, without the wait to be sent).
    #[arg(long)]
    latencies: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::WriteConfig {
            dir,
            bindings,
            secret_env,
        } => write_config(&dir, bindings, &secret_env),
        Command::Route {
            load,
            token_file,
            inputs,
        } => route(load, &token_file, &inputs),
        Command::Inbound {
            load,
            secret_env,
            channel,
            account,
            peers,
            peer_kind,
            expect_status,
        } => inbound(
            load,
            Inbound {
                secret_env,
                channel,
                account,
                peers,
                peer_kind,
                expect_status,
            },
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn write_config(dir: &Path, bindings: usize, secret_env: &str) -> Result<(), String> {
    let g = generate::generate_routing(bindings);
    // The generator writes each runtime as one flow-style line under its agent; its command
    // does not exist and would crash-loop under the controller (as deepcli-gen-config
    // --no-runtimes does).
    let mut agents: String = g
        .agents
        .lines()
        .filter(|line| !line.trim_start().starts_with("runtime:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let anchor = "  list:\n";
    let at = agents
        .find(anchor)
        .ok_or("the generated agents.yaml has no `  list:`")?
        + anchor.len();
    agents.insert_str(
        at,
        "    - id: echo\n      name: Echo\n      runtime: {kind: acp, command: [deepcli, echo-agent]}\n",
    );
    // The inbound policy as a real hub has it: an allowlist of ALLOW_FROM senders, among them
    // every peer the inbound stage speaks for (`bench-peer-<i>`), each message checked.
    let allow_from: Vec<String> = (0..ALLOW_FROM).map(|i| format!("bench-peer-{i}")).collect();
    let mut channels = g.channels;
    channels.push_str(&format!(
        "  webchat:\n    accounts:\n      default:\n        webhookSecret: {{source: env, id: {secret_env}}}\n        dmPolicy: allowlist\n        allowFrom: [{}]\n",
        allow_from.join(", ")
    ));
    let mut bindings = g.bindings;
    bindings.push_str("  - agentId: echo\n    match: {channel: webchat, accountId: default}\n");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text);
    std::fs::create_dir_all(dir)
        .and_then(|()| write("agents.yaml", &agents))
        .and_then(|()| write("channels.yaml", &channels))
        .and_then(|()| write("bindings.yaml", &bindings))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// What one worker builds its requests from.
enum Source {
    Route {
        token: String,
        inputs: Arc<Vec<Bytes>>,
    },
    Inbound {
        secret: Vec<u8>,
        channel: String,
        account: Option<String>,
        peers: usize,
        peer_kind: String,
        run: String,
    },
}

struct Inbound {
    secret_env: String,
    channel: String,
    account: Option<String>,
    peers: Option<usize>,
    peer_kind: String,
    expect_status: u16,
}

fn route(load: LoadArgs, token_file: &Path, inputs: &Path) -> Result<(), String> {
    let token = std::fs::read_to_string(token_file)
        .map_err(|e| format!("{}: {e}", token_file.display()))?
        .trim()
        .to_string();
    let text = std::fs::read_to_string(inputs).map_err(|e| format!("{}: {e}", inputs.display()))?;
    let inputs: Vec<Bytes> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Bytes::copy_from_slice(l.as_bytes()))
        .collect();
    if inputs.is_empty() {
        return Err("no route inputs".into());
    }
    run(
        load,
        "/v1/route",
        Source::Route {
            token,
            inputs: Arc::new(inputs),
        },
        200,
    )
}

fn inbound(load: LoadArgs, args: Inbound) -> Result<(), String> {
    let secret = std::env::var(&args.secret_env)
        .map_err(|_| format!("environment variable `{}` is not set", args.secret_env))?;
    let run_id = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let peers = args.peers.unwrap_or(load.concurrency).max(1);
    run(
        load,
        "/v1/inbound",
        Source::Inbound {
            secret: secret.into_bytes(),
            channel: args.channel,
            account: args.account,
            peers,
            peer_kind: args.peer_kind,
            run: run_id,
        },
        args.expect_status,
    )
}

/// What one worker saw.
#[derive(Default)]
struct Tally {
    /// Latencies in µs of the recorded requests.
    latencies: Vec<u32>,
    /// With `--latencies`: each recorded request's due time (ms after the start), latency
    /// (µs), success, and time from sending to the answer (µs).
    samples: Vec<(u64, u32, bool, u32)>,
    ok: u64,
    status: BTreeMap<String, u64>,
    matched_by: BTreeMap<String, u64>,
    empty_replies: u64,
    duplicates: u64,
    first_error: Option<String>,
    last_done: Option<Instant>,
}

struct Shared {
    path: &'static str,
    host: String,
    source: Source,
    expect: u16,
    measure_from: Instant,
    /// Set when the duration is over (or the count is reached).
    stop: AtomicBool,
    /// Measured requests handed out (count mode).
    tickets: AtomicU64,
    limit: Option<u64>,
    timeout: Duration,
    started: Instant,
    /// Each worker's pause between two requests (`--rate`).
    interval: Option<Duration>,
    keep_samples: bool,
}

fn run(load: LoadArgs, path: &'static str, source: Source, expect: u16) -> Result<(), String> {
    let watch: Vec<(String, i32)> = load
        .watch
        .iter()
        .map(|w| {
            let (name, pid) = w
                .split_once('=')
                .ok_or_else(|| format!("--watch {w}: not NAME=PID"))?;
            Ok((
                name.to_string(),
                pid.parse().map_err(|_| format!("--watch {w}: not a pid"))?,
            ))
        })
        .collect::<Result<_, String>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(load.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let duration = match (load.duration, load.requests) {
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(load.warmup);
    let shared = Arc::new(Shared {
        path,
        host: load.addr.clone(),
        source,
        expect,
        measure_from,
        stop: AtomicBool::new(false),
        tickets: AtomicU64::new(0),
        limit: if duration.is_some() {
            None
        } else {
            load.requests
        },
        timeout: Duration::from_millis(load.timeout_ms),
        started,
        interval: load
            .rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(load.concurrency.max(1) as f64 / r)),
        keep_samples: load.latencies.is_some(),
    });
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();

    let (tallies, cpu, load_start, load_end, window) = runtime.block_on(async {
        let workers: Vec<_> = (0..load.concurrency)
            .map(|i| tokio::spawn(worker(shared.clone(), i, load.concurrency)))
            .collect();
        tokio::time::sleep_until(measure_from.into()).await;
        let load_start = loadavg();
        let cpu0: Vec<Option<u64>> = watch.iter().map(|(_, pid)| cpu_ticks(*pid)).collect();
        let self0 = cpu_ticks(std::process::id() as i32);
        if let Some(d) = duration {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                () = appears(load.stop_file.as_deref()) => {}
            }
            shared.stop.store(true, Ordering::SeqCst);
        }
        let mut tallies = Vec::new();
        for w in workers {
            tallies.push(w.await.map_err(|e| e.to_string())?);
        }
        let end = Instant::now();
        let load_end = loadavg();
        let last = tallies
            .iter()
            .filter_map(|t| t.last_done)
            .max()
            .unwrap_or(end);
        let window = if duration.is_some() { end } else { last } - measure_from;
        let hz = 100.0; // USER_HZ on Linux (cpu_us_per_ok assumes it too)
        let pct = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => {
                json!(((b - a) as f64 / hz / window.as_secs_f64() * 1000.0).round() / 10.0)
            }
            _ => Value::Null,
        };
        let mut cpu = serde_json::Map::new();
        let mut ticks = serde_json::Map::new();
        let watched = watch
            .iter()
            .map(|(name, pid)| (name.as_str(), *pid))
            .chain([("client", std::process::id() as i32)]);
        for ((name, pid), before) in watched.zip(cpu0.into_iter().chain([self0])) {
            let after = cpu_ticks(pid);
            cpu.insert(name.to_string(), pct(before, after));
            if let (Some(a), Some(b)) = (before, after) {
                ticks.insert(name.to_string(), json!(b - a));
            }
        }
        Ok::<_, String>((tallies, (cpu, ticks), load_start, load_end, window))
    })?;

    let mut all = Tally::default();
    let mut samples = Vec::new();
    for t in tallies {
        all.latencies.extend(t.latencies);
        samples.extend(t.samples);
        all.ok += t.ok;
        for (k, v) in t.status {
            *all.status.entry(k).or_default() += v;
        }
        for (k, v) in t.matched_by {
            *all.matched_by.entry(k).or_default() += v;
        }
        all.empty_replies += t.empty_replies;
        all.duplicates += t.duplicates;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    all.latencies.sort_unstable();
    if let Some(path) = &load.latencies {
        samples.sort_unstable();
        let mut text = String::with_capacity(samples.len() * 24);
        for (due, us, ok, service) in samples {
            text.push_str(&format!(
                "{} {us} {} {service}\n",
                started_unix_ms + due,
                u8::from(ok)
            ));
        }
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let n = all.latencies.len();
    let pct = |p: f64| -> Value {
        if n == 0 {
            return Value::Null;
        }
        let rank = ((p / 100.0) * n as f64).ceil().max(1.0) as usize;
        json!(f64::from(all.latencies[rank.min(n) - 1]) / 1000.0)
    };
    let mean = if n == 0 {
        Value::Null
    } else {
        json!(
            (all.latencies.iter().map(|&l| u64::from(l)).sum::<u64>() as f64 / n as f64 / 1000.0
                * 1000.0)
                .round()
                / 1000.0
        )
    };
    let secs = window.as_secs_f64();
    let mut out = json!({
        "path": path,
        "concurrency": load.concurrency,
        "threads": load.threads,
        "window_s": (secs * 1000.0).round() / 1000.0,
        "requests": n,
        "ok": all.ok,
        "errors": n as u64 - all.ok,
        "status": all.status,
        "rps": (all.ok as f64 / secs).round(),
        "p50_ms": pct(50.0),
        "p90_ms": pct(90.0),
        "p99_ms": pct(99.0),
        "p999_ms": pct(99.9),
        "max_ms": pct(100.0),
        "mean_ms": mean,
        "cpu_pct": cpu.0,
        // CPU time per successful request, µs: what the figure costs whatever the machine's load.
        "cpu_us_per_ok": cpu.1.iter().map(|(name, t)| {
            let us = t.as_u64().unwrap_or(0) as f64 * 10_000.0 / all.ok.max(1) as f64;
            (name.clone(), json!(us.round()))
        }).collect::<serde_json::Map<_, _>>(),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
    });
    if !all.matched_by.is_empty() {
        out["matched_by"] = json!(all.matched_by);
    }
    if matches!(shared.source, Source::Inbound { .. }) {
        out["empty_replies"] = json!(all.empty_replies);
        out["duplicates"] = json!(all.duplicates);
    }
    if let Some(e) = all.first_error {
        out["first_error"] = json!(e);
    }
    println!("{out}");
    Ok(())
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(host: &str) -> Result<Sender, String> {
    let stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| format!("connect {host}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn worker(shared: Arc<Shared>, index: usize, workers: usize) -> Tally {
    let mut tally = Tally::default();
    let mut sender: Option<Sender> = None;
    let mut seq: u64 = 0;
    let (mut cursor, peer) = match &shared.source {
        Source::Route { inputs, .. } => (index * inputs.len() / workers.max(1), 0),
        Source::Inbound { peers, .. } => (0, index % peers),
    };
    // Paced: worker `index` of `workers` starts its schedule `index / workers` of an interval in.
    let mut due = shared
        .interval
        .map(|every| shared.started + every.mul_f64(index as f64 / workers.max(1) as f64));
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(at) = due {
            tokio::time::sleep_until(at.into()).await;
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
        }
        let now = Instant::now();
        let measured = now >= shared.measure_from;
        if measured
            && let Some(limit) = shared.limit
            && shared.tickets.fetch_add(1, Ordering::Relaxed) >= limit
        {
            shared.stop.store(true, Ordering::Relaxed);
            break;
        }
        let request = match &shared.source {
            Source::Route { token, inputs } => {
                let body = inputs[cursor % inputs.len()].clone();
                cursor += 1;
                Request::post(shared.path)
                    .header("host", &shared.host)
                    .header("content-type", "application/json")
                    .header("authorization", format!("Bearer {token}"))
                    .body(Full::new(body))
            }
            Source::Inbound {
                secret,
                channel,
                account,
                peer_kind,
                run,
                ..
            } => {
                let mut envelope = json!({
                    "channel": channel,
                    "peer": {"kind": peer_kind, "id": format!("bench-peer-{peer}")},
                    "messageId": format!("{run}-{index}-{seq}"),
                    "sender": {"id": format!("bench-peer-{peer}")},
                    "text": format!("hello {seq} from worker {index}"),
                });
                if let Some(a) = account {
                    envelope["accountId"] = json!(a);
                }
                let body = Bytes::from(envelope.to_string());
                let signature = deepcli::sign(secret, &body);
                Request::post(shared.path)
                    .header("host", &shared.host)
                    .header("content-type", "application/json")
                    .header("x-deepcli-signature", signature)
                    .body(Full::new(body))
            }
        };
        seq += 1;
        let Ok(request) = request else {
            tally
                .first_error
                .get_or_insert("could not build a request".into());
            break;
        };
        if sender.is_none() {
            match connect(&shared.host).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    record_error(&mut tally, measured, "connect", e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let s = sender.as_mut().expect("connected");
        // A paced request's latency counts from when it was due.
        let sent = Instant::now();
        let t0 = due.map_or(sent, |at| at.min(sent));
        if let (Some(at), Some(every)) = (due.as_mut(), shared.interval) {
            *at += every;
        }
        let answer = tokio::time::timeout(shared.timeout, async {
            s.ready().await.map_err(|e| format!("connection: {e}"))?;
            let response = s
                .send_request(request)
                .await
                .map_err(|e| format!("request: {e}"))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await;
        let done = Instant::now();
        let record = t0 >= shared.measure_from;
        if record {
            let us = u32::try_from((done - t0).as_micros()).unwrap_or(u32::MAX);
            tally.latencies.push(us);
            if shared.keep_samples {
                let due_ms = (t0 - shared.started).as_millis() as u64;
                let service = u32::try_from((done - sent).as_micros()).unwrap_or(u32::MAX);
                tally.samples.push((due_ms, us, false, service));
            }
            tally.last_done = Some(done);
        }
        match answer {
            Err(_) => {
                sender = None;
                record_error(&mut tally, record, "timeout", "timed out".into());
            }
            Ok(Err(e)) => {
                sender = None;
                record_error(&mut tally, record, "transport", e);
            }
            Ok(Ok((status, body))) => {
                if !record {
                    continue;
                }
                *tally.status.entry(status.to_string()).or_default() += 1;
                let success = (200..300).contains(&status) && status == shared.expect;
                if success {
                    tally.ok += 1;
                    if let Some(sample) = tally.samples.last_mut().filter(|_| shared.keep_samples) {
                        sample.2 = true;
                    }
                } else if tally.first_error.is_none() {
                    tally.first_error = Some(format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(300)])
                    ));
                }
                match &shared.source {
                    Source::Route { .. } => {
                        if let Some(m) = field(&body, b"\"matchedBy\":\"") {
                            *tally.matched_by.entry(m).or_default() += 1;
                        }
                    }
                    Source::Inbound { .. } => {
                        if success && find(&body, b"\"reply\":{\"text\":\"echo: ").is_none() {
                            tally.empty_replies += 1;
                            if tally.first_error.is_none() {
                                tally.first_error = Some(format!(
                                    "HTTP {status} without the echo reply: {}",
                                    String::from_utf8_lossy(&body[..body.len().min(300)])
                                ));
                            }
                        }
                        if find(&body, b"\"duplicate\":true").is_some() {
                            tally.duplicates += 1;
                        }
                    }
                }
            }
        }
    }
    tally
}

fn record_error(tally: &mut Tally, record: bool, kind: &str, message: String) {
    if record {
        *tally.status.entry(kind.to_string()).or_default() += 1;
    }
    tally
        .first_error
        .get_or_insert_with(|| format!("{kind}: {message}"));
}

/// Resolves once `path` exists (never when there is none).
async fn appears(path: Option<&Path>) {
    let Some(path) = path else {
        return std::future::pending().await;
    };
    while !path.exists() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The string value after `prefix` (up to the next `"`).
fn field(body: &[u8], prefix: &[u8]) -> Option<String> {
    let start = find(body, prefix)? + prefix.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    Some(String::from_utf8_lossy(&body[start..start + len]).into_owned())
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
