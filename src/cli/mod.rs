//! The command line: argument parsing, settings resolution and printing. Nothing else.
//!
//! Layers, as in uv: clap structs (no behaviour) → resolved settings → a command function that
//! takes plain values, calls the library and returns an [`ExitStatus`].

mod route;
mod schema;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::LoadOptions;

const EXIT_CODES: &str = "\
Exit codes:
  0  success (for validate: the config is valid; warnings allowed unless --strict)
  1  the config is invalid, or the command failed
  2  the command could not run (bad flags, unreadable config directory)";

#[derive(Debug, Parser)]
#[command(
    name = "deepcli",
    version,
    about = "Declarative reconciler and control plane for multi-agent chat hubs",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
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
    /// The state directory [default: ~/.deepcli].
    #[arg(long, global = true, env = "DEEPCLI_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the config files: JSON Schema plus semantic rules, each finding at file:line:col.
    #[command(after_help = EXIT_CODES)]
    Validate(validate::ValidateArgs),
    /// Show which agent and session a message gets, and with --explain why.
    Route(Box<route::RouteArgs>),
    /// Print the JSON Schema of one config file.
    Schema(schema::SchemaArgs),
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
pub struct GlobalSettings {
    pub config_dir: PathBuf,
    pub load: LoadOptions,
}

impl GlobalSettings {
    fn resolve(args: GlobalArgs) -> GlobalSettings {
        let mut load = LoadOptions::from_env();
        if let Some(state_dir) = args.state_dir {
            load.state_dir = state_dir;
        }
        GlobalSettings {
            config_dir: args.config,
            load,
        }
    }
}

/// Parses the arguments and runs the command.
pub fn run() -> ExitStatus {
    let cli = Cli::parse();
    let global = GlobalSettings::resolve(cli.global);
    match cli.command {
        Command::Validate(args) => validate::run(&global, args),
        Command::Route(args) => route::run(&global, *args),
        Command::Schema(args) => schema::run(args),
    }
}
