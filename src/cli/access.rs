//! `deepcli access serve`: the Access API on a published routing plan.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::up::{AccessArgs, LogFormat, async_runtime, init_logging};
use super::{ExitStatus, GlobalSettings};

#[derive(Debug, Subcommand)]
pub(super) enum AccessCommand {
    /// Serve the Access API on a published routing plan (no config, no runtimes); reload it
    /// when its generation changes.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// The routing plan to serve (`<state>/routing-plan.json` as `deepcli apply` publishes it).
    #[arg(long, value_name = "FILE")]
    plan: PathBuf,
    /// Where the HTTP API listens.
    #[arg(long, default_value = "127.0.0.1:7430", value_name = "ADDR")]
    listen: SocketAddr,
    /// Log format (RUST_LOG selects what is logged).
    #[arg(long, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(flatten)]
    access: AccessArgs,
}

pub(super) fn run(global: &GlobalSettings, command: AccessCommand) -> ExitStatus {
    let AccessCommand::Serve(args) = command;
    let _ = init_logging(args.log_format, global.output, None);
    let runtime = match async_runtime() {
        Ok(runtime) => runtime,
        Err(status) => return status,
    };
    let state = global.state();
    let served = runtime.block_on(crate::access::serve::run(
        args.plan,
        state,
        args.listen,
        args.access.settings(),
    ));
    match served {
        Ok(()) => ExitStatus::Success,
        Err(crate::access::serve::ServeError::State(e)) => super::state_error(&e),
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "error: {e}");
            ExitStatus::Failure
        }
    }
}
