//! `deepcli up` and `deepcli status`.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;

use super::{ExitStatus, GlobalSettings};
use crate::controller::client::Client;
use crate::controller::status::ControllerStatus;
use crate::controller::{self, ControllerOptions};
use crate::state::{StateDir, StateStore};

#[derive(Debug, Args)]
#[command(after_help = "\
--allow-destroy and --allow-mass-delete let through the guard of the plan the controller's
first apply makes (start it with them after `deepcli status` shows such a plan blocked, once
you have checked the config); every later plan is guarded again.

Exit codes:
  0  stopped by SIGINT or SIGTERM
  1  failed: the state is locked by another writer, the address cannot be listened on
  2  could not run: unreadable or empty config directory, damaged state database; nothing
     was created")]
pub(super) struct UpArgs {
    /// Where the HTTP API listens (the last one given counts).
    #[arg(
        long,
        default_value = "127.0.0.1:7430",
        value_name = "ADDR",
        overrides_with = "listen"
    )]
    listen: SocketAddr,
    /// The URL others reach this controller's listener at, when not the listen address
    /// (behind a proxy, or with --listen 0.0.0.0): the base of the webhooks remote A2A agents
    /// that cannot stream are given (docs/a2a.md).
    #[arg(long, value_name = "URL", env = "DEEPCLI_PUBLIC_URL", value_parser = public_url)]
    public_url: Option<url::Url>,
    /// Log format (RUST_LOG selects what is logged).
    #[arg(long, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    /// Seconds between resyncs that repair drift and catch missed file events.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    resync: u64,
    /// How long to let a burst of file events settle before reloading (the last one given
    /// counts).
    #[arg(
        long,
        default_value_t = 200,
        value_name = "MS",
        overrides_with = "debounce_ms"
    )]
    debounce_ms: u64,
    /// Let the plan of the controller's first apply delete protected agents; every later plan
    /// is guarded again.
    #[arg(long)]
    allow_destroy: bool,
    /// Let the plan of the controller's first apply delete more than half of the managed
    /// agents; every later plan is guarded again.
    #[arg(long)]
    allow_mass_delete: bool,
    /// Run on a config directory that holds none of agents.yaml, channels.yaml, bindings.yaml
    /// (a hub of only the implicit agent `main`); without it that is an error at start, and a
    /// rejected edit later.
    #[arg(long)]
    allow_empty: bool,
    /// Check what `up` needs and start nothing: the config valid, the state usable, the listen
    /// address free (a service manager's pre-start check; exit 1 when `up` would not start).
    #[arg(long)]
    check_config: bool,
    /// Send traces to this OpenTelemetry collector (its OTLP/HTTP base URL, e.g.
    /// http://127.0.0.1:4318): one trace per inbound message and per Hub run. Off by default.
    #[arg(long, value_name = "URL", env = "DEEPCLI_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// This replica's name among the controllers that share a PostgreSQL state
    /// (docs/scale-out.md): unique to each. Default: the host name.
    #[arg(long, value_name = "ID", env = "DEEPCLI_REPLICA_ID")]
    replica_id: Option<String>,
    /// Where the other replicas reach this one's listener (default: --public-url, else the
    /// listen address).
    #[arg(long, value_name = "URL", env = "DEEPCLI_ADVERTISE", value_parser = public_url)]
    advertise: Option<url::Url>,
    /// A file holding the secret the replicas share to hand turns to each other (never the
    /// operator token). Without it (or DEEPCLI_CLUSTER_TOKEN) a replica answers only for the
    /// agents it runs.
    #[arg(long, value_name = "FILE")]
    cluster_token_file: Option<std::path::PathBuf>,
    /// How long a replica's claims (the leadership, an agent, an account) last unless
    /// renewed: a dead replica's agents run elsewhere within it.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    claim_ttl_ms: u64,
    #[command(flatten)]
    access: AccessArgs,
}

/// A replica's options, when the state is in PostgreSQL (`--state-url`): its id, where it is
/// reached, the cluster token. `Err`: what to fix.
fn cluster_options(
    global: &GlobalSettings,
    args: &UpArgs,
) -> Result<Option<controller::cluster::ClusterOptions>, String> {
    if global.state().postgres().is_none() {
        let given = [
            (args.replica_id.is_some(), "--replica-id"),
            (args.advertise.is_some(), "--advertise"),
            (args.cluster_token_file.is_some(), "--cluster-token-file"),
        ];
        if let Some((_, flag)) = given.iter().find(|(given, _)| *given) {
            return Err(format!(
                "{flag} is for controllers that share a PostgreSQL state; give --state-url (or DEEPCLI_STATE_URL), or leave it out"
            ));
        }
        return Ok(None);
    }
    let id = args.replica_id.clone().unwrap_or_else(crate::os::hostname);
    if id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control() || c == '/') {
        return Err(format!(
            "--replica-id `{id}` is not a replica's name: give 1 to 128 characters without `/` or control characters"
        ));
    }
    let advertise = match (&args.advertise, &args.public_url) {
        (Some(url), _) | (None, Some(url)) => url.clone(),
        (None, None) => format!("http://{}", args.listen)
            .parse()
            .map_err(|e| format!("--listen {} makes no URL: {e}", args.listen))?,
    };
    if advertise.host_str() == Some("0.0.0.0") || advertise.host_str() == Some("[::]") {
        return Err(format!(
            "the other replicas cannot reach {advertise}; give --advertise URL, the address they reach this host at"
        ));
    }
    let token = match &args.cluster_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --cluster-token-file `{}`: {e}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => std::env::var("DEEPCLI_CLUSTER_TOKEN").ok(),
    };
    let token = match token {
        Some(t) if t.len() < 16 => {
            return Err(
                "the cluster token is shorter than 16 characters; make one with `openssl rand -hex 32`"
                    .into(),
            );
        }
        token => token.map(std::sync::Arc::from),
    };
    Ok(Some(controller::cluster::ClusterOptions {
        id,
        advertise,
        token,
        token_file: args.cluster_token_file.clone(),
        ttl: Duration::from_millis(args.claim_ttl_ms.max(300)),
    }))
}

/// `--public-url`: an `http` or `https` URL with a host, and nothing a remote must not be
/// given (credentials) or that a path cannot follow (a query, a fragment).
fn public_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text).map_err(|e| {
        format!("`{text}` is not a URL ({e}); give the base others reach the listener at, e.g. https://hub.example.com")
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "`{text}` is not an http or https URL with a host, e.g. https://hub.example.com"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{text}` holds credentials, which every remote it is given would see; leave them out"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{text}` has a query or a fragment; give only the scheme, host, port and path"
        ));
    }
    Ok(url)
}

/// `up --check-config`: what `up` would refuse at start, found without starting anything.
fn check_config(global: &GlobalSettings, args: &UpArgs) -> ExitStatus {
    let mut err = anstream::stderr();
    if let Some(Err(e)) = args.otlp_endpoint.as_deref().map(crate::traces::traces_url) {
        let _ = writeln!(err, "error: {e}");
        return ExitStatus::Failure;
    }
    match crate::config::check_dir(&global.config_dir) {
        Ok(false) if !args.allow_empty => {
            let _ = writeln!(
                err,
                "error: `{}` holds none of agents.yaml, channels.yaml, bindings.yaml",
                global.config_dir.display()
            );
            let _ = writeln!(
                err,
                "hint: point --config at the hub's directory, or pass --allow-empty"
            );
            return ExitStatus::Failure;
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return ExitStatus::Failure;
        }
        Ok(_) => {}
    }
    let counts = match super::load_valid_with(global, "`deepcli up` would not start", |c| {
        (c.agents.len(), c.channels.len(), c.bindings.len())
    }) {
        Ok((_, counts)) => counts,
        Err(_) => return ExitStatus::Failure,
    };
    let dir = global.state();
    let state = match crate::state::StateStore::open_existing(&dir) {
        Ok(Some(store)) => format!(
            "state {} (serial {})",
            dir.root().display(),
            store.serial().unwrap_or(0)
        ),
        Ok(None) => format!("state {} (new: made at start)", dir.root().display()),
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            if let Some(hint) = e.hint() {
                let _ = writeln!(err, "hint: {hint}");
            }
            return ExitStatus::Failure;
        }
    };
    if let Err(e) = std::net::TcpListener::bind(args.listen) {
        let _ = writeln!(err, "error: cannot listen on {}: {e}", args.listen);
        let _ = writeln!(
            err,
            "hint: stop what listens there, or pass another address with --listen ADDR"
        );
        return ExitStatus::Failure;
    }
    let (agents, channels, bindings) = counts;
    let _ = writeln!(
        std::io::stdout().lock(),
        "ok: config {} valid ({}, {}, {}); {state}; {} free: `deepcli up` would start",
        global.config_dir.display(),
        crate::plural::plural(agents, "agent", "agents"),
        crate::plural::plural(channels, "channel", "channels"),
        crate::plural::plural(bindings, "binding", "bindings"),
        args.listen,
    );
    ExitStatus::Success
}

/// `--log-max-size`: a size as people write it, `8MiB`, `512k`, `1G` (binary units) or bytes.
fn log_size(text: &str) -> Result<u64, String> {
    let bytes = parse_size::Config::new()
        .with_binary()
        .parse_size(text)
        .map_err(|e| format!("{e}; write it as e.g. 8MiB, 512k or 1G"))?;
    if bytes < 4096 {
        return Err("a log file of less than 4 KiB holds next to nothing; write e.g. 8MiB".into());
    }
    Ok(bytes)
}

/// How the Access API takes messages (`deepcli up` and `deepcli access serve`).
#[derive(Debug, Args)]
pub(super) struct AccessArgs {
    /// How big a runtime's or a channel's log grows before it rotates (`8MiB`, `512k`, `1G`).
    #[arg(long, default_value = "8MiB", value_name = "SIZE", value_parser = log_size)]
    log_max_size: u64,
    /// How many older files of each log are kept (`<log>.1` the newest) when it rotates.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    log_keep: u32,
    /// How long an agent may take to answer a message before the prompt is cancelled.
    #[arg(long, default_value_t = 120_000, value_name = "MS")]
    prompt_timeout_ms: u64,
    /// The largest request body accepted (413 above).
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES")]
    body_limit: usize,
    /// Messages that may wait per session behind the one being answered (429 above).
    #[arg(long, default_value_t = 32, value_name = "N")]
    queue_limit: usize,
    /// How long a connection may stay idle, or take to send a request's headers or the next
    /// part of its body, before it is closed.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    idle_timeout_ms: u64,
}

impl AccessArgs {
    pub(super) fn settings(&self) -> crate::access::AccessSettings {
        crate::access::AccessSettings {
            body_limit: self.body_limit,
            prompt_timeout: Duration::from_millis(self.prompt_timeout_ms),
            queue_limit: self.queue_limit,
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            log_limit: crate::access::LogLimit {
                bytes: self.log_max_size,
                keep: self.log_keep,
            },
            ..crate::access::AccessSettings::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum LogFormat {
    /// One line per event, for people.
    Human,
    /// One JSON object per event, for log collectors.
    Json,
}

#[derive(Debug, Args)]
#[command(after_help = "\
The status comes from the running controller, or, when none runs, from the state database:
then a runtime recorded as running whose process is gone shows as `gone`.

Health (the `health` line; `health` in --json, with `status` and `reasons`) is degraded when
the config on disk is rejected, a plan is blocked waiting for an operator, the last reconcile
failed, a runtime is in a crash loop or cannot start, or a channel account takes no messages;
and, when no controller runs, when a runtime the config asks for is not running.

Exit codes (for health checks; --json exits the same way):
  0  healthy
  1  degraded: the health line says why
  2  could not run: no state in the directory, or a damaged state database")]
pub(super) struct StatusArgs {
    /// Print the status as JSON (with `health`).
    #[arg(long)]
    json: bool,
}

/// Logs to stderr: what RUST_LOG selects, else `info` (`warn` with --quiet), coloured as
/// --color says. With `otlp` (a collector's OTLP/HTTP base URL), traces go there too and each
/// log line shows the spans it is in, the root's with its trace id; the exporter returned must
/// be dropped after the async runtime ends (it flushes what is left).
pub(super) fn init_logging(
    format: LogFormat,
    output: super::Output,
    otlp: Option<&str>,
) -> Result<Option<crate::traces::Exporter>, String> {
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{Layer, Registry};

    let default = if output.quiet { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (exporter, tracer) = match otlp {
        Some(endpoint) => {
            let (exporter, tracer) = crate::traces::exporter(endpoint)?;
            (Some(exporter), Some(tracer))
        }
        None => (None, None),
    };
    let traced = tracer.is_some();
    let shown = filter.or(filter_fn(move |meta| {
        traced && crate::traces::is_span(meta)
    }));
    let colour = anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never;
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Json => lines.json().with_filter(shown).boxed(),
        LogFormat::Human => lines
            .fmt_fields(crate::log_line::fields())
            .with_filter(shown)
            .boxed(),
    };
    let spans = tracer.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter_fn(crate::traces::is_span))
    });
    let _ = tracing_subscriber::registry()
        .with(lines)
        .with(spans)
        .try_init();
    Ok(exporter)
}

/// The async runtime of the long-running commands (two workers: the machine's I/O and the
/// blocking pool do the rest).
pub(super) fn async_runtime() -> Result<tokio::runtime::Runtime, ExitStatus> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            let _ = writeln!(
                anstream::stderr(),
                "error: cannot start the async runtime: {e}"
            );
            ExitStatus::Error
        })
}

pub(super) fn up(global: &GlobalSettings, args: UpArgs) -> ExitStatus {
    if args.check_config {
        return check_config(global, &args);
    }
    let cluster = match cluster_options(global, &args) {
        Ok(cluster) => cluster,
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            return ExitStatus::Error;
        }
    };
    let traces = match init_logging(
        args.log_format,
        global.output,
        args.otlp_endpoint.as_deref(),
    ) {
        Ok(traces) => traces,
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            return ExitStatus::Error;
        }
    };
    let runtime = match async_runtime() {
        Ok(runtime) => runtime,
        Err(status) => return status,
    };
    let options = ControllerOptions {
        config_dir: global.config_dir.clone(),
        load: global.load.clone(),
        state: global.state(),
        listen: args.listen,
        public_url: args.public_url,
        resync: Duration::from_secs(args.resync.max(1)),
        debounce: Duration::from_millis(args.debounce_ms),
        access: args.access.settings(),
        first_apply: controller::FirstApply {
            allow_destroy: args.allow_destroy,
            allow_mass_delete: args.allow_mass_delete,
        },
        allow_empty: args.allow_empty,
        // The one place the timings the tests shorten are read from the environment.
        timings: controller::Timings::from_env(),
        cluster,
    };
    let ran = runtime.block_on(controller::run(options));
    // The runtime first: the exporter's flush blocks, which an async worker may not.
    drop(runtime);
    drop(traces);
    match ran {
        Ok(()) => ExitStatus::Success,
        Err(controller::ControllerError::State(e)) => super::state_error(&e),
        // As `validate` and `plan` say it, before anything was created.
        Err(e @ controller::ControllerError::Config(_)) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            let _ = writeln!(
                anstream::stderr(),
                "hint: pass the config directory with --config DIR (or DEEPCLI_CONFIG)"
            );
            ExitStatus::Error
        }
        Err(e @ controller::ControllerError::Empty(_)) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            let _ = writeln!(
                anstream::stderr(),
                "hint: point --config (or DEEPCLI_CONFIG) at the directory that holds your config files; to run a hub of only the implicit agent `main`, pass --allow-empty"
            );
            ExitStatus::Error
        }
        Err(e @ controller::ControllerError::Listen { .. }) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            let _ = writeln!(
                anstream::stderr(),
                "hint: another process listens there (`deepcli status` says whether it is a deepcli controller); pass another address with --listen ADDR, e.g. --listen 127.0.0.1:7431"
            );
            ExitStatus::Failure
        }
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            ExitStatus::Failure
        }
    }
}

pub(super) fn status(global: &GlobalSettings, args: StatusArgs) -> ExitStatus {
    let dir = global.state();
    // A health check that cannot read the state cannot tell: 2, not "degraded".
    let could_not_run = |e: &crate::state::StateError| {
        super::state_error(e);
        ExitStatus::Error
    };
    let store = match StateStore::open_existing(&dir) {
        Ok(Some(store)) => store,
        Ok(None) => {
            let _ = writeln!(
                anstream::stderr(),
                "error: no deepcli state in `{}`; start `deepcli up` or run `deepcli apply`",
                dir.root().display()
            );
            return ExitStatus::Error;
        }
        Err(e) => return could_not_run(&e),
    };
    let (doc, health) = match ask_controller(&dir, &store) {
        Ok(status) => {
            let health = status.health();
            let mut doc = serde_json::to_value(status).unwrap_or_default();
            doc["source"] = "controller".into();
            (doc, health)
        }
        Err(unanswered) => {
            let snapshot = match store.snapshot() {
                Ok(snapshot) => snapshot,
                Err(e) => return could_not_run(&e),
            };
            // Pids are the word of the controller that holds the state, when one does.
            let runtimes: Vec<_> = if unanswered.is_some() {
                snapshot.runtimes
            } else {
                snapshot
                    .runtimes
                    .into_iter()
                    .map(crate::state::RuntimeRecord::seen_now)
                    .collect()
            };
            let health = crate::controller::Health::of_state(&runtimes, unanswered);
            let doc = serde_json::json!({
                "source": "state",
                "serial": snapshot.serial,
                "routingGeneration": snapshot.routing.as_ref().map(|r| r.generation),
                "agents": snapshot.agents.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
                "runtimes": runtimes,
                "controller": Value::Null,
            });
            (doc, health)
        }
    };
    let mut doc = doc;
    doc["health"] = serde_json::to_value(&health).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if args.json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        );
    } else {
        let _ = out.write_all(human(&doc).as_bytes());
    }
    match health.status {
        crate::controller::HealthStatus::Healthy => ExitStatus::Success,
        crate::controller::HealthStatus::Degraded => ExitStatus::Failure,
    }
}

/// The status of the controller that holds `store`'s lease. `Err(None)`: no controller holds
/// it; `Err(Some(why))`: one does, and does not answer.
fn ask_controller(dir: &StateDir, store: &StateStore) -> Result<ControllerStatus, Option<String>> {
    let holder = store.lease_holder().ok().flatten();
    let Some(holder) = holder.filter(|h| h.purpose == crate::state::LeasePurpose::Controller)
    else {
        return Err(None);
    };
    let unanswered = |why: String| {
        Some(format!(
            "a controller (pid {} on {}) holds this state but {why}; the status below is what the state database recorded",
            holder.pid, holder.host
        ))
    };
    let Some(client) = Client::find(dir, store) else {
        return Err(unanswered(
            "its address or operator token cannot be found".into(),
        ));
    };
    client.status().map_err(|e| unanswered(why_unanswered(&e)))
}

/// Why a controller that holds the state gave no status: a refused operator token is not "does
/// not answer".
fn why_unanswered(e: &crate::controller::client::ClientError) -> String {
    match e {
        crate::controller::client::ClientError::Refused { status, .. }
            if *status == hyper::StatusCode::UNAUTHORIZED =>
        {
            "refused the operator token (401): DEEPCLI_OPERATOR_TOKEN, when set, must be the controller's (<state>/operator-token); unset it to use the state's".into()
        }
        e => format!("does not answer: {e}"),
    }
}

fn human(doc: &Value) -> String {
    let mut out = String::new();
    let text = |v: &Value| match v {
        Value::Null => "—".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    out.push_str(&format!(
        "health       {}\n",
        text(&doc["health"]["status"])
    ));
    for reason in doc["health"]["reasons"].as_array().into_iter().flatten() {
        out.push_str(&format!("               {}\n", text(reason)));
    }
    if doc["source"] == "controller" {
        out.push_str(&format!(
            "controller   pid {} since {} (config {})\n",
            text(&doc["pid"]),
            text(&doc["startedAt"]),
            text(&doc["configDir"])
        ));
        out.push_str(&format!(
            "config       {} applied {}\n",
            text(&doc["configHash"]),
            text(&doc["appliedAt"])
        ));
    } else if doc["health"]["reasons"]
        .as_array()
        .and_then(|r| r.first())
        .and_then(Value::as_str)
        .is_some_and(|r| r.starts_with("a controller (pid"))
    {
        out.push_str("controller   runs, but gave no status (status from the state database)\n");
    } else {
        out.push_str("controller   not running (status from the state database)\n");
    }
    out.push_str(&format!(
        "state        serial {}, routing plan generation {}\n",
        text(&doc["serial"]),
        text(&doc["routingGeneration"])
    ));
    // Several controllers on one PostgreSQL state (docs/scale-out.md): which one answered,
    // which leads, who runs what.
    for r in doc["replicas"].as_array().into_iter().flatten() {
        let list = |key: &str| {
            let names: Vec<String> = r[key].as_array().into_iter().flatten().map(text).collect();
            if names.is_empty() {
                "—".to_owned()
            } else {
                names.join(", ")
            }
        };
        let mut marks = Vec::new();
        if r["leader"] == true {
            marks.push("leader");
        }
        if r["id"] == doc["replica"] {
            marks.push("this one");
        }
        out.push_str(&format!(
            "replica      {:<16} {}{}  seen {}\n               agents: {}\n               accounts: {}\n",
            text(&r["id"]),
            text(&r["url"]),
            if marks.is_empty() {
                String::new()
            } else {
                format!(" ({})", marks.join(", "))
            },
            text(&r["lastSeen"]),
            list("agents"),
            list("accounts"),
        ));
    }
    if let Some(rejected) = doc.get("rejected").filter(|r| !r.is_null()) {
        out.push_str(&format!(
            "rejected     edit {} since {} (the last good config keeps running):\n",
            text(&rejected["configHash"]),
            text(&rejected["since"])
        ));
        for d in rejected["diagnostics"].as_array().into_iter().flatten() {
            out.push_str(&format!("               {}\n", text(d)));
        }
    }
    for b in doc["blocked"].as_array().into_iter().flatten() {
        out.push_str(&format!("blocked      {}\n", text(b)));
    }
    for c in doc["closedAccounts"].as_array().into_iter().flatten() {
        out.push_str(&format!("closed       {} (takes no messages)\n", text(c)));
    }
    for (channel, c) in doc["channels"].as_object().into_iter().flatten() {
        for (account, a) in c["accounts"].as_object().into_iter().flatten() {
            let adapter = &a["adapter"];
            if adapter.is_null() {
                continue;
            }
            let bot = &adapter["identity"];
            out.push_str(&format!(
                "adapter      {:<24} {:<11} {}{}{}\n",
                format!("{channel}/{account}"),
                text(&adapter["state"]),
                text(&adapter["mode"]),
                if bot.is_null() {
                    String::new()
                } else {
                    format!("  bot {} ({})", text(&bot["botUserId"]), text(&bot["name"]))
                },
                adapter
                    .get("lastEventAt")
                    .filter(|e| !e.is_null())
                    .map_or_else(String::new, |e| format!("  last event {}", text(e)))
            ));
            if let Some(e) = adapter.get("lastError").filter(|e| !e.is_null()) {
                out.push_str(&format!("               last error: {}\n", text(e)));
            }
        }
    }
    let runtimes = doc["runtimes"].as_array().cloned().unwrap_or_default();
    if runtimes.is_empty() {
        out.push_str("runtimes     none\n");
    }
    for r in &runtimes {
        out.push_str(&format!(
            "runtime      {:<16} {:<11} pid {:<8} restarts {}  since {}{}{}\n",
            text(&r["agentId"]),
            text(&r["status"]),
            text(&r["pid"]),
            text(&r["restarts"]),
            text(&r["startedAt"]),
            r.get("nextStart")
                .filter(|e| !e.is_null())
                .map_or_else(String::new, |e| format!("  next start {}", text(e))),
            r.get("lastError")
                .filter(|e| !e.is_null())
                .map_or_else(String::new, |e| format!("  last error: {}", text(e)))
        ));
        if let Some(sandbox) = r.get("sandbox").filter(|s| !s.is_null()) {
            out.push_str(&format!("               sandbox: {}\n", text(sandbox)));
        }
        if let Some(model) = r.get("model").filter(|m| !m.is_null()) {
            out.push_str(&format!(
                "               model {}{}\n",
                text(&model["wanted"]),
                super::output::model_status(
                    serde_json::from_value::<crate::manage::live::ModelStatus>(model.clone())
                        .ok()
                        .as_ref()
                )
            ));
        }
        if let Some(b) = r.get("budgets").filter(|b| !b.is_null()) {
            out.push_str(&budget_line(b));
        }
    }
    for (agent, h) in doc["heartbeats"].as_object().into_iter().flatten() {
        let n = |key: &str| h[key].as_u64().unwrap_or(0);
        out.push_str(&format!(
            "heartbeat    {agent:<16} every {}: {} ({} ok, {} delivered, {} kept, {} failed), {} skipped; last {}: {}\n",
            text(&h["every"]),
            crate::plural::plural(n("beats"), "beat", "beats"),
            n("ok"),
            n("delivered"),
            n("kept"),
            n("failed"),
            n("skipped"),
            text(&h["lastAt"]),
            text(&h["last"]),
        ));
    }
    let hub = &doc["hub"];
    if hub.is_object() {
        let n = |key: &str| hub[key].as_u64().unwrap_or(0);
        let denials: u64 = hub["denials"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        out.push_str(&format!(
            "hub          {}, {}, {}; {} active ({} spawned); {}; {}\n",
            crate::plural::plural(n("calls") as usize, "tool call", "tool calls"),
            crate::plural::plural(n("sends") as usize, "send", "sends"),
            crate::plural::plural(n("spawns") as usize, "spawn", "spawns"),
            crate::plural::plural(n("activeRuns") as usize, "run", "runs"),
            n("activeSpawns"),
            crate::plural::plural(
                n("liveTokens") as usize,
                "live session token",
                "live session tokens"
            ),
            crate::plural::plural(denials as usize, "denial", "denials"),
        ));
        for pause in hub["loopPauses"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "loop paused  run {}: {}; decide with `deepcli runs resume|stop {}`\n",
                text(&pause["runId"]),
                text(&pause["why"]),
                text(&pause["runId"]),
            ));
        }
    }
    out
}

/// One agent's budgets in `deepcli status`: used of allowed (`-` where no budget is set);
/// usage a runtime never reported is `unknown`, never 0.
fn budget_line(b: &Value) -> String {
    let of = |used: &Value, limit: &Value| {
        let used = match used {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if limit.is_null() {
            used
        } else {
            format!("{used}/{limit}")
        }
    };
    let mut out = format!(
        "               budgets turns {} last hour, running {}, spawns {} last hour, tokens {} today, cost {} USD today\n",
        of(&b["turnsLastHour"], &b["turnsPerHour"]),
        of(&b["runningTurns"], &b["concurrentTurns"]),
        of(&b["spawnsLastHour"], &b["spawnsPerHour"]),
        of(&b["tokensToday"], &b["tokensPerDay"]),
        of(&b["costTodayUsd"], &b["costPerDayUsd"]),
    );
    // A count at its limit refuses the agent's next turn or spawn: said in words.
    let at_limit: Vec<&str> = [
        ("turnsLastHour", "turnsPerHour"),
        ("spawnsLastHour", "spawnsPerHour"),
        ("tokensToday", "tokensPerDay"),
        ("costTodayUsd", "costPerDayUsd"),
    ]
    .into_iter()
    .filter(|(used, limit)| {
        matches!((b[*used].as_f64(), b[*limit].as_f64()), (Some(u), Some(l)) if u >= l)
    })
    .map(|(_, limit)| limit)
    .collect();
    if !at_limit.is_empty() {
        out.push_str(&format!(
            "               over budget: {} reached; the agent's next turns are refused until the window moves on\n",
            at_limit.join(", ")
        ));
    }
    for note in b["notes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "               {}\n",
            note.as_str().unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::client::ClientError;

    #[test]
    fn a_public_url_is_an_http_base_with_nothing_a_remote_must_not_see() {
        assert_eq!(
            public_url("https://hub.example/deepcli/").unwrap().as_str(),
            "https://hub.example/deepcli/"
        );
        assert!(public_url("http://127.0.0.1:7430").is_ok());
        for (bad, says) in [
            ("hub.example", "is not a URL"),
            ("ftp://hub.example", "not an http or https URL"),
            ("https://me:secret@hub.example", "holds credentials"),
            ("https://hub.example/?a=1", "a query or a fragment"),
            ("https://hub.example/#x", "a query or a fragment"),
        ] {
            let e = public_url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_budget_at_its_limit_is_said_in_words() {
        let b = serde_json::json!({"turnsLastHour": 6, "turnsPerHour": 6, "runningTurns": 0,
            "concurrentTurns": null, "spawnsLastHour": 1, "spawnsPerHour": 60,
            "tokensToday": "unknown", "tokensPerDay": 100, "costTodayUsd": "unknown",
            "costPerDayUsd": null, "notes": []});
        assert!(budget_line(&b).ends_with(
            "over budget: turnsPerHour reached; the agent's next turns are refused until the window moves on\n"
        ));
        let under = serde_json::json!({"turnsLastHour": 5, "turnsPerHour": 6});
        assert!(!budget_line(&under).contains("over budget"));
    }

    #[test]
    fn the_replicas_are_shown_with_the_leader_and_what_each_runs() {
        let doc = serde_json::json!({
            "source": "controller", "health": {"status": "healthy", "reasons": []},
            "pid": 7, "startedAt": "2026-12-06T12:00:00Z", "configDir": "/hub",
            "configHash": "sha256:ab", "appliedAt": "2026-12-06T12:00:01Z",
            "serial": 3, "routingGeneration": 2, "replica": "hub-b",
            "replicas": [
                {"id": "hub-a", "url": "http://10.0.0.11:7430", "leader": true,
                 "agents": ["coder", "main"], "accounts": ["telegram/default"],
                 "lastSeen": "2026-12-06T12:00:09Z"},
                {"id": "hub-b", "url": "http://10.0.0.12:7430", "leader": false,
                 "agents": ["reviewer"], "accounts": [], "lastSeen": "2026-12-06T12:00:10Z"}
            ],
            "runtimes": []
        });
        insta::assert_snapshot!(human(&doc));
    }

    #[test]
    fn a_wrong_operator_token_is_reported_as_refused_not_as_no_controller() {
        let refused = ClientError::Refused {
            status: hyper::StatusCode::UNAUTHORIZED,
            body: "{\"error\":\"unauthorized\"}".into(),
        };
        let why = why_unanswered(&refused);
        assert!(why.starts_with("refused the operator token (401)"), "{why}");
        let health = crate::controller::Health::of_state(
            &[],
            Some(format!(
                "a controller (pid 7 on h) holds this state but {why}"
            )),
        );
        let doc = serde_json::json!({"source": "state", "health": health});
        let text = human(&doc);
        assert!(
            text.contains("controller   runs, but gave no status"),
            "{text}"
        );
        assert!(!text.contains("not running"), "{text}");
    }
}
