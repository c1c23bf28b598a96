//! The command line: argument parsing, settings resolution and printing. Nothing else.
//!
//! Layers, as in uv: clap structs (no behaviour) → resolved settings → a command function that
//! takes plain values, calls the library and returns an [`ExitStatus`].

mod a2a;
mod access;
mod agents;
mod approvals;
mod audit;
mod channels;
mod console;
mod doctor;
mod emit;
mod fake_platform;
mod hub;
mod inbound;
mod init;
mod openclaw;
mod output;
mod pairing;
mod plan;
mod route;
mod route_gate;
mod sandbox;
mod schema;
mod state;
mod up;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::config::LoadOptions;
use output::Color;
pub(crate) use output::Output;

macro_rules! exit_codes {
    () => {
        "\
Exit codes:
  0  success (for validate: the config is valid; warnings allowed unless --strict)
  1  the config is invalid, or the command failed
  2  the command could not run (bad flags, unreadable config directory, damaged state database)"
    };
}

const EXIT_CODES: &str = exit_codes!();

const AFTER_HELP: &str = concat!(
    "\
Global options go before or after the command. A command's help lists the ones it reads; it
accepts the others and ignores them, so an alias can pass the same ones to every command.

",
    exit_codes!()
);

#[derive(Debug, Parser)]
#[command(
    name = "deepcli",
    version,
    about = "Declarative reconciler and control plane for multi-agent chat hubs",
    after_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The flags every command takes, before or after its name. A command that does not read one
/// of the directories or the state's URL does not show it in its help ([`UNREAD`]), but
/// accepts it: a wrapper or alias can pass the same flags to every command.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
struct GlobalArgs {
    /// The config directory holding agents.yaml, channels.yaml and bindings.yaml.
    #[arg(
        long,
        global = true,
        env = "DEEPCLI_CONFIG",
        default_value = ".",
        value_name = "DIR"
    )]
    config: PathBuf,
    /// The state directory (state database, default workspaces, logs, trash) [default:
    /// ~/.deepcli].
    #[arg(long, global = true, env = "DEEPCLI_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The state's database in PostgreSQL instead of the state directory's state.db
    /// (`postgres://user@host:5432/db`), for several controllers on one state
    /// (docs/scale-out.md). The state directory still holds the files.
    #[arg(
        long,
        global = true,
        env = "DEEPCLI_STATE_URL",
        value_name = "URL",
        value_parser = crate::state::db::PgUrl::parse
    )]
    state_url: Option<crate::state::db::PgUrl>,
    /// When to colour the output: auto colours a terminal, unless NO_COLOR is set or
    /// CLICOLOR_FORCE forces it.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto, value_name = "WHEN")]
    color: Color,
    /// Print only results and errors: no "Wrote …", "No changes", progress or notes.
    #[arg(short, long, global = true)]
    quiet: bool,
}

/// Commands that do not read a global directory flag: it is hidden from their help (and
/// accepted, and ignored). By command path, then the flags' ids.
const UNREAD: &[(&[&str], &[&str])] = &[
    // It reads the state directory's place (for the agents' paths), not its database.
    (&["validate"], &["state_url"]),
    (&["status"], &["config"]),
    (&["history"], &["config"]),
    // `state prune` reads agents.yaml's state.retention; the others only the state.
    (&["state", "export"], &["config"]),
    (&["state", "backup"], &["config"]),
    (&["state", "restore"], &["config"]),
    (&["state", "check"], &["config"]),
    (&["trash", "list"], &["config"]),
    (&["access"], &["config"]),
    (&["schema"], &["config", "state_dir", "state_url"]),
    (
        &["channels", "capabilities"],
        &["config", "state_dir", "state_url"],
    ),
    // Routing reads the config alone: the state directory changes nothing it prints.
    (&["route"], &["state_dir", "state_url"]),
    (&["pairing"], &["config"]),
    (&["sessions"], &["config"]),
    (&["runs"], &["config"]),
    (&["hub"], &["config", "state_dir", "state_url"]),
    (&["approvals"], &["config"]),
    (&["inbound"], &["config"]),
    (&["audit"], &["config"]),
    (&["demo-agent"], &["config", "state_dir", "state_url"]),
    (&["fake-platform"], &["config", "state_dir", "state_url"]),
    (&["a2a"], &["config", "state_dir", "state_url"]),
    (&["completions"], &["config", "state_dir", "state_url"]),
    (&["man"], &["config", "state_dir", "state_url"]),
    // Its DIR is the config directory, and the state directory it suggests lies in it.
    (&["init"], &["config", "state_dir", "state_url"]),
];

/// Commands that read a global directory flag for a reason of their own: its help there says
/// which. By command path, the flag's id, the help.
const READ_FOR: &[(&[&str], &str, &str)] = &[(
    &["validate"],
    "state_dir",
    "The state directory: agents' default workspaces lie in it, and the sandbox rules check that no agent is given it [default: ~/.deepcli]",
)];

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a hub: agents.yaml, channels.yaml and bindings.yaml that work at once (main
    /// answering with the demo agent), their schemas, a .gitignore for the state.
    Init(init::InitArgs),
    /// Check the config files: JSON Schema plus semantic rules, each finding at file:line:col.
    #[command(after_help = EXIT_CODES)]
    Validate(validate::ValidateArgs),
    /// Check what the hub needs from this machine: secrets set, runtimes found, a sandbox,
    /// the listen address free, each platform reachable and taking its credentials.
    Doctor(doctor::DoctorArgs),
    /// Run the controller: apply, watch the config, supervise runtimes, serve the API.
    Up(up::UpArgs),
    /// The Access API on its own: `deepcli access serve --plan routing-plan.json`.
    #[command(subcommand)]
    Access(access::AccessCommand),
    /// The controller's status, or the state's when no controller runs.
    Status(up::StatusArgs),
    /// The running controller's web console: print its URL and open it in a browser.
    Console(console::ConsoleArgs),
    /// Messages into the hub through the running controller (`inbound send`).
    #[command(subcommand)]
    Inbound(inbound::InboundCommand),
    /// Show what `apply` would change: the config against the live state.
    Plan(Box<plan::PlanArgs>),
    /// Converge the world to the config: workspaces, trash moves, routing plan.
    Apply(plan::ApplyArgs),
    /// The live state.
    #[command(subcommand)]
    State(state::StateCommand),
    /// The audit trail of applies.
    History(state::HistoryArgs),
    /// What deleting agents moved away, and how to put it back.
    #[command(subcommand)]
    Trash(state::TrashCommand),
    /// Show which agent and session a message gets, and with --explain why.
    Route(Box<route::RouteArgs>),
    /// Print the JSON Schema of one config file.
    Schema(schema::SchemaArgs),
    /// Manage agents and their bindings (edits agents.yaml and bindings.yaml losslessly).
    #[command(subcommand, after_help = emit::MANAGE_EXIT_CODES)]
    Agents(agents::AgentsCommand),
    /// Manage channel accounts (edits channels.yaml losslessly; references only).
    #[command(subcommand, after_help = emit::MANAGE_EXIT_CODES)]
    Channels(channels::ChannelsCommand),
    /// Bring a config in from another tool: `import openclaw openclaw.json`.
    #[command(subcommand)]
    Import(openclaw::ImportCommand),
    /// Write the config out for another tool: `export openclaw`.
    #[command(subcommand)]
    Export(openclaw::ExportCommand),
    /// Answer senders who asked to pair (dmPolicy: pairing): list, approve, revoke.
    #[command(subcommand, after_help = emit::PAIRING_EXIT_CODES)]
    Pairing(pairing::PairingCommand),
    /// Sessions of the running hub: list, show, history, send (as the operator), cancel,
    /// close.
    #[command(subcommand)]
    Sessions(hub::SessionsCommand),
    /// Runs of the Hub (sessions_send, sessions_spawn): list, show, cancel, resume, stop.
    #[command(subcommand)]
    Runs(hub::RunsCommand),
    /// Tasks agents give each other (docs/tasks.md): list, show, and a person's verdict — accept,
    /// reject (back to the assignee with the reason), cancel.
    #[command(subcommand)]
    Tasks(hub::TasksCommand),
    /// What agents ask a person for: list, show, approve, deny; allow_always rules, revoke.
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCommand),
    /// What happened, as one timeline from the state database: inbound messages, routes,
    /// sends and spawns, budget refusals, loop pauses, cancels, applies.
    #[command(after_help = EXIT_CODES)]
    Audit(audit::AuditArgs),
    /// What an agent's sandbox lets its runtime touch: `sandbox explain AGENT`.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// An A2A client: read a card, send a message, get or cancel a task (`a2a send URL TEXT`).
    #[command(subcommand)]
    A2a(a2a::A2aCommand),
    /// The Hub's MCP server on stdio (`hub mcp`), which deepcli gives its agents to start.
    #[command(subcommand)]
    Hub(hub::HubCommand),
    /// The demo ACP agent: calls Hub tools, asks permissions and asks back as its prompts say.
    ///
    /// It speaks ACP on stdin and stdout and runs no model: an agent's runtime
    /// `{kind: acp, command: [deepcli, demo-agent]}` shows the hub at work offline
    /// (examples/hub-demo).
    #[command(alias = "echo-agent", after_help = crate::demo_agent::HELP)]
    DemoAgent,
    /// A fake Telegram or Slack to try the adapters on, and a person chatting through it.
    ///
    /// `deepcli fake-platform telegram` serves the platform's API on 127.0.0.1:7441 and says
    /// how to point channels.yaml at it; type at its prompt, or `deepcli fake-platform say
    /// TEXT` from another terminal (docs/channels.md, examples/chat-demo).
    #[command(subcommand)]
    FakePlatform(fake_platform::FakePlatformCommand),
    /// Print the shell completion script for bash, zsh or fish.
    ///
    /// `deepcli completions bash > ~/.local/share/bash-completion/completions/deepcli`,
    /// `deepcli completions zsh > "${fpath[1]}/_deepcli"`,
    /// `deepcli completions fish > ~/.config/fish/completions/deepcli.fish`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page.
    ///
    /// `deepcli man > ~/.local/share/man/man1/deepcli.1`, or read it at once with
    /// `deepcli man | man -l -`.
    Man,
}

/// How a command ended; the binary turns it into the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Done, nothing wrong.
    Success,
    /// Done, and what was checked is wrong (an invalid config) or the command failed.
    Failure,
    /// Could not run at all.
    Error,
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(match status {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Error => 2,
        })
    }
}

/// Settings every command shares, resolved from flags and the environment.
#[derive(Debug, Clone)]
pub(crate) struct GlobalSettings {
    pub config_dir: PathBuf,
    pub load: LoadOptions,
    /// `--state-url`: the state's database in PostgreSQL.
    pub state_url: Option<crate::state::db::PgUrl>,
    pub(crate) output: Output,
}

impl GlobalSettings {
    fn resolve(args: GlobalArgs) -> GlobalSettings {
        let mut load = LoadOptions::from_env();
        if let Some(state_dir) = args.state_dir {
            load.state_dir = state_dir;
        }
        // Workspaces and agentDirs resolve under the state directory and are recorded in
        // state: they must not depend on the directory deepcli happens to run in.
        if let Ok(absolute) = std::path::absolute(&load.state_dir) {
            load.state_dir = absolute;
        }
        GlobalSettings {
            config_dir: args.config,
            load,
            state_url: args.state_url,
            output: Output { quiet: args.quiet },
        }
    }

    /// The state: the state directory, its database there or at `--state-url`.
    pub(crate) fn state(&self) -> crate::state::StateDir {
        crate::state::StateDir::located(&self.load.state_dir, self.state_url.as_ref())
    }
}

/// The command tree `deepcli` parses with: [`Cli`]'s, with the global flags a command does not
/// read hidden from its help, and a flag a command reads for a reason of its own described so.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    for (path, id, why) in READ_FOR {
        let described: Vec<clap::Arg> = command
            .get_arguments()
            .filter(|a| a.get_id() == *id)
            .map(|a| a.clone().help(*why))
            .collect();
        command = at(command, path, &|sub| {
            described.iter().cloned().fold(sub, clap::Command::arg)
        });
    }
    for (path, ids) in UNREAD {
        let hidden: Vec<clap::Arg> = command
            .get_arguments()
            .filter(|a| ids.contains(&a.get_id().as_str()))
            .map(|a| a.clone().hide(true))
            .collect();
        // The subcommand's own copy, hidden: clap propagates a global flag only to commands
        // that lack one, and the copy (global too) is what the command's subcommands get.
        command = at(command, path, &|sub| {
            hidden.iter().cloned().fold(sub, clap::Command::arg)
        });
    }
    command
}

/// `command` with `change` applied to its subcommand at `path`.
fn at(
    command: clap::Command,
    path: &[&str],
    change: &dyn Fn(clap::Command) -> clap::Command,
) -> clap::Command {
    match path {
        [] => change(command),
        [name, rest @ ..] => command.mut_subcommand(name, |sub| at(sub, rest, change)),
    }
}

/// Parses the arguments; on bad ones (and `--help`, `--version`) prints and exits.
pub fn parse() -> Cli {
    let mut command = command();
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut matches| Cli::from_arg_matches_mut(&mut matches));
    match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // clap answers these before the arguments are read: find --color for it alone.
            if let Some(color) = Color::among(std::env::args_os()) {
                color.apply();
            }
            e.format(&mut command).exit()
        }
    }
}

impl Cli {
    /// `up` and `access serve`: the commands that run until stopped.
    pub fn is_long_running(&self) -> bool {
        matches!(
            self.command,
            Command::Up(_) | Command::Access(access::AccessCommand::Serve(_))
        )
    }
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> ExitStatus {
    cli.global.color.apply();
    let global = GlobalSettings::resolve(cli.global);
    match cli.command {
        Command::Init(args) => init::run(&global, args),
        Command::Validate(args) => validate::run(&global, args),
        Command::Doctor(args) => doctor::run(&global, args),
        Command::Up(args) => up::up(&global, args),
        Command::Status(args) => up::status(&global, args),
        Command::Console(args) => console::run(&global, args),
        Command::Inbound(command) => inbound::run(&global, command),
        Command::Access(command) => access::run(&global, command),
        Command::Plan(args) => plan::plan(&global, *args),
        Command::Apply(args) => plan::apply(&global, args),
        Command::State(command) => state::state(&global, command),
        Command::History(args) => state::history(&global, args),
        Command::Trash(command) => state::trash(&global, command),
        Command::Route(args) => route::run(&global, *args),
        Command::Schema(args) => schema::run(args),
        Command::Agents(command) => agents::run(&global, command),
        Command::Channels(command) => channels::run(&global, command),
        Command::Import(command) => openclaw::import(&global, command),
        Command::Export(command) => openclaw::export(&global, command),
        Command::Pairing(command) => pairing::run(&global, command),
        Command::Sessions(command) => hub::sessions(&global, command),
        Command::Runs(command) => hub::runs(&global, command),
        Command::Tasks(command) => hub::tasks(&global, command),
        Command::Approvals(command) => approvals::run(&global, command),
        Command::Audit(args) => audit::run(&global, args),
        Command::Sandbox(command) => sandbox::run(&global, command),
        Command::Hub(command) => hub::hub(command),
        Command::A2a(command) => a2a::run(command),
        Command::DemoAgent => demo_agent(),
        Command::FakePlatform(command) => fake_platform::run(command),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command(), "deepcli", &mut script);
            print_bytes(&script)
        }
        Command::Man => {
            let mut page = Vec::new();
            match clap_mangen::Man::new(command()).render(&mut page) {
                Ok(()) => print_bytes(&page),
                Err(e) => {
                    eprintln!("error: cannot render the man page: {e}");
                    ExitStatus::Error
                }
            }
        }
    }
}

/// Writes `bytes` to stdout; a reader that stopped early (`| head`) is no error.
fn print_bytes(bytes: &[u8]) -> ExitStatus {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("error: cannot write to stdout: {e}");
            ExitStatus::Error
        }
        _ => ExitStatus::Success,
    }
}

/// Loads and validates the config directory, running `alongside` on the loaded config while the
/// rules run (on another thread); what it made is dropped when the rules find an error.
/// Diagnostics go to stderr (stdout carries only results); a config with errors is refused.
pub(crate) fn load_valid_with<T: Send>(
    global: &GlobalSettings,
    refusal: &str,
    alongside: impl FnOnce(&crate::config::Config) -> T + Send,
) -> Result<(crate::validate::Report, T), ExitStatus> {
    use std::io::Write;
    let mut err = anstream::stderr();
    let loaded = crate::config::load(&global.config_dir, &global.load).map_err(|e| {
        let _ = writeln!(err, "error: {e}");
        let _ = writeln!(
            err,
            "hint: pass the config directory with --config DIR (or DEEPCLI_CONFIG)"
        );
        ExitStatus::Error
    })?;
    let (report, made) = crate::validate::finish_with(loaded, alongside);
    if !report.diagnostics.is_empty() {
        let _ = err.write_all(crate::report::human(&report).as_bytes());
    }
    match made {
        Some(made) if report.is_valid() => Ok((report, made)),
        _ => {
            let _ = writeln!(err, "error: the config has errors; {refusal}");
            Err(ExitStatus::Failure)
        }
    }
}

/// Prints a state error with its hint and says how the command ends: a state that cannot be
/// used at all means the command could not run.
pub(crate) fn state_error(e: &crate::state::StateError) -> ExitStatus {
    use std::io::Write;
    let mut err = anstream::stderr();
    let _ = writeln!(err, "error: {e}");
    if let Some(hint) = e.hint() {
        let _ = writeln!(err, "hint: {hint}");
    }
    if e.is_unusable() {
        ExitStatus::Error
    } else {
        ExitStatus::Failure
    }
}

/// A single-threaded async runtime for a command's own calls; `Err` once it said why not.
fn current_thread() -> Result<tokio::runtime::Runtime, ExitStatus> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitStatus::Error
        })
}

fn demo_agent() -> ExitStatus {
    let runtime = match current_thread() {
        Ok(runtime) => runtime,
        Err(status) => return status,
    };
    match runtime.block_on(crate::demo_agent::serve()) {
        Ok(()) => ExitStatus::Success,
        Err(e) => {
            eprintln!("demo-agent: {e}");
            ExitStatus::Failure
        }
    }
}
